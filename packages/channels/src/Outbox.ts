/**
 * The outbox: every message the channel layer sends is first stored (`ChannelStore.enqueue`) with a
 * deterministic idempotency key, then delivered by one worker per connector.
 *
 * - **Exactly one answer.** Keys derive from (session, run, part) — or (inbound message, part) for
 *   direct answers — so enqueueing the same reply twice (a replayed subscription, a restart) is a
 *   no-op.
 * - **Split** at the platform's length limit, on paragraph, line or word boundaries when possible,
 *   never inside a surrogate pair; each part has its own key and goes out in order.
 * - **Order**: a conversation's messages never overtake each other — only the oldest pending delivery
 *   of each conversation is ever sent, also across restarts.
 * - **Rate limits**: a 429 with retry-after puts the delivery back to `pending` until then, and the
 *   channel's worker pauses that long.
 * - **Crash safety**: a delivery is marked `unknown` before the platform is called. After a restart,
 *   `unknown` deliveries are never re-sent blindly: the connector reconciles them (`sent`, `resend`
 *   when the platform dedupes by key, or left `unknown` and marked).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import type { Errors } from "@palyra/core"
import { Clock, Context, Duration, Effect, Either, Layer, Option, Queue, type Scope } from "effect"
import { ChannelStore, type Delivery, type NewDelivery } from "./ChannelStore.js"
import type { Connector, Outbound } from "./Connector.js"

/**
 * The idempotency key of one outgoing message: SHA-256 over its identifying parts.
 *
 * @since 0.1.0
 * @category Keys
 */
export const deliveryKey = (parts: ReadonlyArray<string>): string =>
  createHash("sha256")
    .update(JSON.stringify(["palyra/channel-delivery/v1", ...parts]))
    .digest("hex")

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/**
 * Split `text` into parts of at most `limit` UTF-16 code units: at the last paragraph break, else
 * line break, else space in the second half of the window; else a hard cut (never between the two
 * halves of a surrogate pair). Whitespace at a cut is dropped; nothing else is.
 *
 * @since 0.1.0
 * @category Splitting
 */
export const split = (text: string, limit: number): ReadonlyArray<string> => {
  if (limit < 2) throw new RangeError("limit must be at least 2")
  const parts: Array<string> = []
  let rest = text
  while (rest.length > limit) {
    const window = rest.slice(0, limit + 1)
    const floor = Math.floor(limit / 2)
    let cut = -1
    let skip = 0
    for (const sep of ["\n\n", "\n", " "]) {
      const at = window.lastIndexOf(sep)
      if (at >= floor) {
        cut = at
        skip = sep.length
        break
      }
    }
    if (cut === -1) {
      cut = isHighSurrogate(rest.charCodeAt(limit - 1)) ? limit - 1 : limit
      skip = 0
    }
    const part = rest.slice(0, cut).trimEnd()
    if (part.length > 0) parts.push(part)
    rest = rest.slice(cut + skip).replace(/^[ \n]+/, "")
  }
  if (rest.length > 0 || parts.length === 0) parts.push(rest)
  return parts
}

/** Where a message goes. @since 0.1.0 @category Models */
export interface Target {
  readonly channel: string
  readonly account: string
  readonly conversation: string
  readonly thread: string | null
  readonly replyTo: string | null
  readonly sessionId?: string | null | undefined
  readonly runId?: string | null | undefined
}

/** @since 0.1.0 @category Models */
export interface Service {
  /**
   * Split `text` at the channel's limit and enqueue each part under the key of `(keyParts, part, i)`.
   * Returns how many parts were new (0 when this message was enqueued before).
   */
  readonly send: (
    target: Target,
    keyParts: ReadonlyArray<string>,
    part: string,
    text: string
  ) => Effect.Effect<number, Errors.JournalError>
  /** The channel's message length limit. */
  readonly limitOf: (channel: string) => number
}

/** @since 0.1.0 @category Tags */
export class Outbox extends Context.Tag("@palyra/channels/Outbox")<Outbox, Service>() {}

/** @since 0.1.0 @category Models */
export interface Options {
  /** One worker per connector; channels without a connector only store their deliveries. */
  readonly connectors: ReadonlyArray<Connector>
  /** How often an idle worker looks for due deliveries (default 1 second); enqueueing wakes it at once. */
  readonly pollInterval?: Duration.DurationInput | undefined
  /** Sends tried before a delivery that keeps failing transiently is marked `failed` (default 8). */
  readonly maxAttempts?: number | undefined
  /** Length limit for channels without a connector (default 4,000). */
  readonly defaultLimit?: number | undefined
}

const toOutbound = (d: Delivery): Outbound => ({
  key: d.key,
  account: d.account,
  conversation: d.conversation,
  thread: d.thread,
  replyTo: d.replyTo,
  text: d.text,
  createdAt: d.createdAt
})

/** Backoff after the n-th transient failure: 1 s, 2 s, 4 s … capped at 5 minutes. */
const backoff = (attempts: number) => Math.min(300_000, 1000 * 2 ** Math.max(0, attempts - 1))

/**
 * The outbox and its workers (which live in the scope).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<Service, never, ChannelStore | Scope.Scope> =>
  Effect.gen(function* () {
    const store = yield* ChannelStore
    const pollMs = Duration.toMillis(Duration.decode(options.pollInterval ?? "1 second"))
    const maxAttempts = options.maxAttempts ?? 8
    const wakers = new Map<string, Queue.Queue<void>>()
    const limits = new Map(options.connectors.map((c) => [c.channel, c.maxMessageLength]))

    /** Send one delivery; returns how long the channel must pause before the next send (ms). */
    const deliverOne = (connector: Connector, d: Delivery) =>
      Effect.gen(function* () {
        const startedAt = yield* Clock.currentTimeMillis
        // Marked before the call: if the process dies during it, the outcome is known to be unknown.
        yield* store.updateDelivery(d.key, { state: "unknown", attempts: d.attempts + 1 }, startedAt)
        const result = yield* Effect.either(connector.send(toOutbound(d)))
        const now = yield* Clock.currentTimeMillis
        if (Either.isRight(result)) {
          yield* store.updateDelivery(
            d.key,
            { state: "sent", platformMessageId: result.right.platformMessageId, error: null },
            now
          )
          return 0
        }
        const e = result.left
        if (e._tag === "RateLimited") {
          // The platform said slow down: the whole channel waits, and this delivery goes first after.
          yield* store.updateDelivery(
            d.key,
            { state: "pending", nextAttemptAt: now + e.retryAfterMs, error: `rate limited: ${e.message}` },
            now
          )
          return e.retryAfterMs
        }
        if (e.outcome === "unknown") {
          yield* Effect.logWarning("channel delivery outcome unknown; it will not be re-sent blindly").pipe(
            Effect.annotateLogs({ channel: d.channel, key: d.key, error: e.message })
          )
          yield* store.updateDelivery(d.key, { state: "unknown", error: e.message }, now)
          return 0
        }
        if (e.permanent || d.attempts + 1 >= maxAttempts) {
          yield* store.updateDelivery(d.key, { state: "failed", error: e.message }, now)
          return 0
        }
        // Later messages of this conversation wait behind it (see `ChannelStore.due`).
        yield* store.updateDelivery(
          d.key,
          { state: "pending", nextAttemptAt: now + backoff(d.attempts + 1), error: e.message },
          now
        )
        return 0
      })

    const reconcile = (connector: Connector) =>
      Effect.gen(function* () {
        const unknown = yield* store.listDeliveries({ channel: connector.channel, state: "unknown" })
        for (const d of unknown) {
          const verdict = yield* connector.reconcile(toOutbound(d))
          const now = yield* Clock.currentTimeMillis
          if (verdict === "sent") yield* store.updateDelivery(d.key, { state: "sent", error: null }, now)
          else if (verdict === "resend")
            yield* store.updateDelivery(d.key, { state: "pending", nextAttemptAt: now, error: null }, now)
          else
            yield* store.updateDelivery(
              d.key,
              { state: "unknown", error: "outcome unknown after a restart; not re-sent (the platform cannot tell)" },
              now
            )
        }
      })

    const worker = (connector: Connector, wake: Queue.Queue<void>) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const batch = yield* store.due(connector.channel, now, 16)
        for (const d of batch) {
          const pause = yield* deliverOne(connector, d)
          if (pause > 0) return yield* Effect.sleep(pause)
        }
        if (batch.length > 0) return
        const next = yield* store.nextDueAt(connector.channel)
        const wait = Option.match(next, {
          onNone: () => pollMs,
          onSome: (at) => Math.max(1, Math.min(pollMs, at - now))
        })
        // Sleep until the next is due, the poll interval, or a wake-up from `send`.
        yield* Effect.timeout(Queue.take(wake), wait).pipe(Effect.ignore)
      }).pipe(
        Effect.catchAll((e) =>
          Effect.logError("channel outbox worker failed; retrying", e).pipe(Effect.zipRight(Effect.sleep(pollMs)))
        ),
        Effect.forever
      )

    for (const connector of options.connectors) {
      const wake = yield* Queue.sliding<void>(1)
      wakers.set(connector.channel, wake)
      yield* Effect.forkScoped(
        reconcile(connector).pipe(
          Effect.catchAll((e) => Effect.logError("channel outbox reconcile failed", e)),
          Effect.zipRight(worker(connector, wake))
        )
      )
    }

    const limitOf = (channel: string) => limits.get(channel) ?? options.defaultLimit ?? 4000

    const send: Service["send"] = (target, keyParts, part, text) =>
      Effect.gen(function* () {
        const at = yield* Clock.currentTimeMillis
        const pieces = split(text, limitOf(target.channel))
        const deliveries: Array<NewDelivery> = pieces.map((piece, i) => ({
          key: deliveryKey([...keyParts, part, String(i)]),
          channel: target.channel,
          account: target.account,
          conversation: target.conversation,
          thread: target.thread,
          replyTo: i === 0 ? target.replyTo : null,
          sessionId: target.sessionId ?? null,
          runId: target.runId ?? null,
          part: `${part}:${i}`,
          text: piece,
          createdAt: at
        }))
        const inserted = yield* store.enqueue(deliveries)
        const fresh = inserted.filter(Boolean).length
        const wake = wakers.get(target.channel)
        if (fresh > 0 && wake !== undefined) yield* Queue.offer(wake, undefined)
        return fresh
      })

    return { send, limitOf }
  })

/** @since 0.1.0 @category Layers */
export const layer = (options: Options): Layer.Layer<Outbox, never, ChannelStore> => Layer.scoped(Outbox, make(options))

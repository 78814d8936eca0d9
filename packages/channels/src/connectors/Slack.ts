/**
 * Slack, through the Events API (inbound) and `@slack/web-api` (outbound).
 *
 * **Inbound** — Slack `POST`s events to `<listen><path>` (default `/slack/events`). Every request
 * is checked before anything else: `X-Slack-Signature` must be `v0=` + hex HMAC-SHA256 of
 * `v0:<X-Slack-Request-Timestamp>:<raw body>` under the app's signing secret (compared in constant
 * time), and the timestamp must be within the replay window (default 5 minutes). A forged or stale
 * request is answered 401 and only counted. Then:
 *
 * - `url_verification` → `{ challenge }` (Slack's handshake when you save the Request URL);
 * - `event_callback` with a `message` or `app_mention` event → an `InboundMessage` candidate:
 *   Slack channel id → conversation, `thread_ts` → thread, `channel_type: "im"` → direct,
 *   `<@U123>` → mentions, `<!here>`/`<!channel>`/`<!everyone>` → broadcasts, the text as plain text
 *   for the model (`SlackText`: our own mention removed, `@name`, `#channel`, `label (url)`), files → attachment
 *   metadata, `<channel>:<ts>` → the platform message id (so the `message` and `app_mention` events
 *   of one message are one run). Messages from bots (our own included) and edits, joins and other
 *   subtypes are acknowledged and ignored.
 * - A retry (`X-Slack-Retry-Num`) of an event id seen recently is acknowledged without being
 *   handled again (and the router's durable dedupe by platform message id catches the rest).
 *
 * Slack reserves messages starting with `/` for its own slash commands, so chat commands are
 * written with `!` in Slack (`!approve K7Q2XM`); the connector reads them as `/…`.
 *
 * **Outbound** — `chat.postMessage` through `@slack/web-api`'s `WebClient`, its API root
 * configurable (`slackApiUrl`), so a local server speaking Slack's Web API works. Replies go in
 * the thread (`thread_ts`) when the message they answer was in one. The client's own retries are
 * off: the outbox retries, and a 429 becomes `RateLimited` with Slack's `Retry-After`. `ok: false`
 * answers are permanent failures (`channel_not_found`, `not_in_channel`, …) except Slack's
 * transient ones. Every message carries its delivery key as message metadata
 * (`event_type: "palyra_delivery"`), so after a crash a delivery whose outcome is unknown is looked
 * up in the conversation (`conversations.history`, or `conversations.replies` in a thread, since a
 * minute before it was enqueued): found → `sent`; the whole window read and not found → `resend`;
 * anything else (a longer window, a missing scope, an error) → left marked, never sent twice.
 *
 * @since 0.1.0
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import {
  LogLevel,
  WebAPIHTTPError,
  WebAPIPlatformError,
  WebAPIRateLimitedError,
  WebAPIRequestError,
  WebClient
} from "@slack/web-api"
import { Clock, Duration, Effect, FiberSet, Redacted, type Scope } from "effect"
import { COMMANDS } from "../ChannelRouter.js"
import { type Connector, ConnectorError, RateLimited, type Reconciled, SendFailed, type Sink } from "../Connector.js"
import type * as Inbound from "../InboundMessage.js"
import { readBody } from "./internal/http.js"
import * as SlackText from "./SlackText.js"

/** Slack markup as plain text for the model. @since 0.1.0 @category Conversion */
export * as SlackText from "./SlackText.js"

/** @since 0.1.0 @category Models */
export interface Options {
  readonly channel: string
  /** The app's signing secret (Basic Information → App Credentials). */
  readonly signingSecret: Redacted.Redacted<string>
  /** The bot token (`xoxb-…`, OAuth & Permissions). */
  readonly botToken: Redacted.Redacted<string>
  /** The Web API root (default `https://slack.com/api/`). */
  readonly apiRoot?: string | undefined
  readonly listen: {
    readonly host?: string | undefined
    /** `0` picks a free port (see `inboundUrl`). */
    readonly port: number
    readonly path?: string | undefined
  }
  readonly replayWindow?: Duration.DurationInput | undefined
  /** Largest request body accepted (default 1 MiB). */
  readonly maxBodyBytes?: number | undefined
  /** Slack accepts up to 40,000 characters but advises 4,000 (the default). */
  readonly maxMessageLength?: number | undefined
  /** Timeout of one Web API call (default 10 seconds). */
  readonly sendTimeout?: Duration.DurationInput | undefined
}

/** @since 0.1.0 @category Models */
export interface SlackConnector extends Connector {
  /** The inbound URL the server listens on (give Slack the public URL that reaches it). */
  readonly inboundUrl: string
  /** Who the bot is, as `auth.test` answered. */
  readonly bot: { readonly userId: string; readonly teamId: string; readonly botId: string | undefined }
}

/**
 * Slack's request signature for `body` sent at `timestamp` (Unix seconds).
 *
 * @since 0.1.0
 * @category Signing
 */
export const sign = (
  secret: Redacted.Redacted<string>,
  timestamp: number | string,
  body: string | Uint8Array
): string => `v0=${createHmac("sha256", Redacted.value(secret)).update(`v0:${timestamp}:`).update(body).digest("hex")}`

/**
 * Check a request's `X-Slack-Request-Timestamp` and `X-Slack-Signature` against its raw body at
 * `nowMs`: undefined when it authenticates.
 *
 * @since 0.1.0
 * @category Signing
 */
export const verify = (
  secret: Redacted.Redacted<string>,
  headers: { readonly timestamp: string | undefined; readonly signature: string | undefined },
  body: Uint8Array,
  nowMs: number,
  windowMs: number
): "bad_signature" | "stale_signature" | undefined => {
  const ts = headers.timestamp
  if (ts === undefined || !/^\d{1,12}$/.test(ts)) return "bad_signature"
  const sig = headers.signature
  if (sig === undefined || !/^v0=[0-9a-f]{64}$/.test(sig)) return "bad_signature"
  const expected = Buffer.from(sign(secret, ts, body).slice(3), "hex")
  const given = Buffer.from(sig.slice(3), "hex")
  if (!timingSafeEqual(given, expected)) return "bad_signature"
  // After the signature, so a forger learns nothing about our clock.
  if (Math.abs(nowMs - Number(ts) * 1000) > windowMs) return "stale_signature"
  return undefined
}

/** The parts of a Slack `message` / `app_mention` event the connector reads. @since 0.1.0 @category Models */
export interface SlackEvent {
  readonly type?: unknown
  readonly subtype?: unknown
  readonly channel?: unknown
  readonly channel_type?: unknown
  readonly user?: unknown
  readonly bot_id?: unknown
  readonly text?: unknown
  readonly ts?: unknown
  readonly thread_ts?: unknown
  readonly event_ts?: unknown
  readonly files?: unknown
}

/** Subtypes that are a person's message; every other subtype (edits, joins, bots…) is ignored. */
const MESSAGE_SUBTYPES: ReadonlyArray<unknown> = [undefined, "file_share", "thread_broadcast"]
const BROADCAST: Record<string, string> = { here: "@here", channel: "@channel", everyone: "@everyone" }
const str = (v: unknown) => (typeof v === "string" ? v : undefined)
/** `!approve …` and the other chat commands (and `!pair <code>`), read as `/…`; other `!words` stay text. */
const COMMAND = new RegExp(`^\\s*!((?:${[...COMMANDS, "pair"].join("|")})\\b)`, "i")

const attachmentsOf = (files: unknown): Array<Inbound.Attachment> =>
  Array.isArray(files)
    ? files.slice(0, 32).flatMap((f: Record<string, unknown>) => {
        if (typeof f !== "object" || f === null) return []
        const mime = str(f.mimetype)
        const kind: Inbound.Attachment["kind"] =
          mime === undefined
            ? "file"
            : mime.startsWith("image/")
              ? "image"
              : mime.startsWith("audio/")
                ? "audio"
                : mime.startsWith("video/")
                  ? "video"
                  : "file"
        return [
          {
            kind,
            ...(str(f.id) === undefined ? {} : { id: str(f.id)! }),
            ...(str(f.name) === undefined ? {} : { name: str(f.name)! }),
            ...(mime === undefined ? {} : { mimeType: mime }),
            ...(typeof f.size === "number" && Number.isInteger(f.size) && f.size >= 0 ? { size: f.size } : {})
          }
        ]
      })
    : []

/**
 * A Slack event as an `InboundMessage` candidate, or `"ignore"` for events that are not a person's
 * message to read (bots, our own messages, edits, joins, other event types).
 *
 * @since 0.1.0
 * @category Conversion
 */
export const toCandidate = (
  channel: string,
  bot: { readonly userId: string; readonly teamId: string; readonly botId?: string | undefined },
  event: SlackEvent
): unknown => {
  if (event.type !== "message" && event.type !== "app_mention") return "ignore"
  if (!MESSAGE_SUBTYPES.includes(event.subtype)) return "ignore"
  if (event.bot_id !== undefined || event.user === bot.userId) return "ignore"
  const raw = str(event.text) ?? ""
  const mentions: Array<string> = []
  for (const m of raw.matchAll(/<@([UW][A-Z0-9]{1,32})(?:\|[^>]*)?>|<!(here|channel|everyone)(?:\|[^>]*)?>/g)) {
    if (m[1] !== undefined) mentions.push(m[1].toLowerCase())
    else if (m[2] !== undefined) mentions.push(BROADCAST[m[2]]!)
  }
  // Plain text for the model (see `SlackText`); commands: Slack keeps `/` for its own, so
  // `!approve` is read as `/approve`.
  const text = SlackText.toPlainText(raw, bot.userId).replace(COMMAND, "/$1")
  const ts = str(event.ts)
  const conversation = str(event.channel)
  const thread = str(event.thread_ts)
  const user = str(event.user)
  return {
    channel,
    account: bot.teamId,
    conversation,
    thread,
    sender: user === undefined ? undefined : { id: user, verified: true },
    platformMessageId: conversation === undefined || ts === undefined ? undefined : `${conversation}:${ts}`,
    text,
    attachments: attachmentsOf(event.files),
    isDirect: event.channel_type === "im",
    mentions,
    receivedAt: ts !== undefined && /^\d+(\.\d+)?$/.test(ts) ? Math.floor(Number(ts) * 1000) : 0
  }
}

/** The metadata event type every message we post carries, with its delivery key. */
const DELIVERY_EVENT = "palyra_delivery"
/** Messages read when reconciling (Slack's page limit is 1,000; 200 is its advice). */
const RECONCILE_PAGE = 200

/** Slack errors worth another try (the rest of `ok: false` answers are permanent). */
const TRANSIENT = ["internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"]

const classify = (cause: unknown): RateLimited | SendFailed => {
  if (cause instanceof WebAPIRateLimitedError) {
    return new RateLimited({ retryAfterMs: Math.max(1, cause.retryAfter) * 1000, message: "Slack answered 429" })
  }
  if (cause instanceof WebAPIPlatformError) {
    const transient = TRANSIENT.includes(cause.data.error)
    return new SendFailed({
      // Slack answered and said no: nothing was posted.
      outcome: "not_sent",
      permanent: !transient,
      message: `Slack: ${cause.data.error}`
    })
  }
  if (cause instanceof WebAPIHTTPError) {
    return new SendFailed({
      outcome: cause.statusCode >= 500 ? "unknown" : "not_sent",
      permanent: cause.statusCode < 500 && cause.statusCode !== 408,
      status: cause.statusCode,
      message: `Slack answered HTTP ${cause.statusCode}`
    })
  }
  if (cause instanceof WebAPIRequestError) {
    const code = (cause.original as { code?: unknown; cause?: { code?: unknown } }).cause?.code
    return code === "ECONNREFUSED" || code === "ENOTFOUND"
      ? new SendFailed({ outcome: "not_sent", permanent: false, message: cause.message })
      : new SendFailed({ outcome: "unknown", permanent: false, message: cause.message })
  }
  return new SendFailed({ outcome: "unknown", permanent: false, message: String(cause) })
}

const reply = (res: ServerResponse, status: number, body: Record<string, unknown>) => {
  if (res.headersSent) return
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

/** Event ids seen lately (Slack retries within minutes), oldest first; bounded. */
const recentIds = (max: number) => {
  const seen = new Set<string>()
  return {
    /** True the first time. */
    claim: (id: string) => {
      if (seen.has(id)) return false
      seen.add(id)
      if (seen.size > max) seen.delete(seen.values().next().value!)
      return true
    },
    forget: (id: string) => void seen.delete(id)
  }
}

/**
 * Connect to Slack (`auth.test`: a bad token fails here with `ConnectorError`) and start the
 * Events API listener (requests are answered 503 until `start` hands it a sink). The listener
 * closes with the scope.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<SlackConnector, ConnectorError, Scope.Scope> =>
  Effect.gen(function* () {
    const fail = (message: string) => (cause: unknown) =>
      new ConnectorError({
        channel: options.channel,
        message: `${message}: ${cause instanceof Error ? cause.message : String(cause)}`,
        cause
      })
    const path = options.listen.path ?? "/slack/events"
    const windowMs = Duration.toMillis(Duration.decode(options.replayWindow ?? "5 minutes"))
    const maxBody = options.maxBodyBytes ?? 1024 * 1024
    const client = new WebClient(Redacted.value(options.botToken), {
      ...(options.apiRoot === undefined ? {} : { slackApiUrl: options.apiRoot.replace(/\/*$/, "/") }),
      // The outbox retries and honours rate limits; the client must not retry on its own.
      retryConfig: { retries: 0 },
      rejectRateLimitedCalls: true,
      timeout: Duration.toMillis(Duration.decode(options.sendTimeout ?? "10 seconds")),
      logLevel: LogLevel.ERROR
    })
    const auth = yield* Effect.tryPromise({ try: () => client.auth.test(), catch: fail("Slack auth.test failed") })
    if (typeof auth.user_id !== "string" || typeof auth.team_id !== "string") {
      return yield* fail("Slack auth.test failed")("the answer has no user_id or team_id")
    }
    const bot = {
      userId: auth.user_id,
      teamId: auth.team_id,
      botId: typeof auth.bot_id === "string" ? auth.bot_id : undefined
    }
    const run = yield* FiberSet.makeRuntimePromise<never>()
    const events = recentIds(10_000)
    let sink: Sink | undefined

    const header = (req: IncomingMessage, name: string) => {
      const v = req.headers[name]
      return Array.isArray(v) ? v[0] : v
    }

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      if (new URL(req.url ?? "/", "http://localhost").pathname !== path) return reply(res, 404, { error: "not_found" })
      if (req.method !== "POST") return reply(res, 405, { error: "method_not_allowed" })
      if (sink === undefined) return reply(res, 503, { error: "unavailable" })
      if (Number(req.headers["content-length"] ?? "0") > maxBody) {
        res.setHeader("connection", "close")
        return reply(res, 413, { error: "payload_too_large" })
      }
      const body = await readBody(req, maxBody)
      if (body === "too_large") {
        res.setHeader("connection", "close")
        return reply(res, 413, { error: "payload_too_large" })
      }
      const now = await run(Clock.currentTimeMillis)
      const failure = verify(
        options.signingSecret,
        { timestamp: header(req, "x-slack-request-timestamp"), signature: header(req, "x-slack-signature") },
        body,
        now,
        windowMs
      )
      if (failure !== undefined) {
        await run(sink.refuse(failure))
        return reply(res, 401, { error: "unauthenticated" })
      }
      let payload: Record<string, unknown>
      try {
        const parsed: unknown = JSON.parse(body.toString("utf8"))
        if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object")
        payload = parsed as Record<string, unknown>
      } catch {
        await run(sink.refuse("malformed"))
        return reply(res, 400, { error: "malformed" })
      }
      if (payload.type === "url_verification") {
        return typeof payload.challenge === "string"
          ? reply(res, 200, { challenge: payload.challenge })
          : reply(res, 400, { error: "malformed" })
      }
      if (payload.type !== "event_callback" || typeof payload.event !== "object" || payload.event === null) {
        return reply(res, 200, { ok: true, ignored: true })
      }
      const eventId = typeof payload.event_id === "string" ? payload.event_id : undefined
      if (eventId !== undefined && !events.claim(eventId)) return reply(res, 200, { ok: true, duplicate: true })
      const candidate = toCandidate(options.channel, bot, payload.event as SlackEvent)
      if (candidate === "ignore") return reply(res, 200, { ok: true, ignored: true })
      const result = await run(
        sink
          .receive(candidate)
          .pipe(
            Effect.withSpan("Slack.event", { attributes: { eventId, retry: header(req, "x-slack-retry-num") ?? "0" } })
          )
      )
      if (result === "malformed") return reply(res, 400, { error: "malformed" })
      if (result === "failed") {
        // Not handled: let Slack's retry of this event id through.
        if (eventId !== undefined) events.forget(eventId)
        return reply(res, 503, { error: "unavailable" })
      }
      return reply(res, 200, { ok: true })
    }

    const server = createServer((req, res) => {
      handle(req, res).catch(() => reply(res, 500, { error: "internal" }))
    })
    server.requestTimeout = 30_000
    server.headersTimeout = 10_000
    yield* Effect.acquireRelease(
      Effect.async<void, ConnectorError>((resume) => {
        server.once("error", (cause) => resume(Effect.fail(fail("cannot listen")(cause))))
        server.listen(options.listen.port, options.listen.host ?? "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    const address = server.address() as AddressInfo
    const host = address.family === "IPv6" ? `[${address.address}]` : address.address

    const send: Connector["send"] = (message) =>
      Effect.tryPromise({
        try: () =>
          client.chat.postMessage({
            channel: message.conversation,
            text: message.text,
            // Plain text: nothing in a reply is read as a mention or a link.
            parse: "none",
            link_names: false,
            unfurl_links: false,
            unfurl_media: false,
            // Found again by `reconcile` after a crash.
            metadata: { event_type: DELIVERY_EVENT, event_payload: { key: message.key } },
            ...(message.thread === null ? {} : { thread_ts: message.thread })
          }),
        catch: classify
      }).pipe(
        Effect.map((sent) => ({
          platformMessageId: typeof sent.ts === "string" ? `${sent.channel ?? message.conversation}:${sent.ts}` : null
        })),
        Effect.withSpan("Slack.postMessage", { attributes: { channel: options.channel } })
      )

    const reconcile: Connector["reconcile"] = (message) =>
      Effect.tryPromise(() => {
        const window = {
          channel: message.conversation,
          include_all_metadata: true,
          limit: RECONCILE_PAGE,
          ...(message.createdAt === undefined ? {} : { oldest: ((message.createdAt - 60_000) / 1000).toFixed(6) })
        }
        return message.thread === null
          ? client.conversations.history(window)
          : client.conversations.replies({ ...window, ts: message.thread })
      }).pipe(
        Effect.map((answer): Reconciled => {
          const found = (answer.messages ?? []).some(
            (m) =>
              m.metadata?.event_type === DELIVERY_EVENT &&
              (m.metadata.event_payload as { readonly key?: unknown } | undefined)?.key === message.key
          )
          if (found) return "sent"
          // Sending again is safe only when every message since the delivery was enqueued was read.
          return message.createdAt !== undefined && answer.has_more !== true ? "resend" : "unknown"
        }),
        Effect.catchAll((cause) =>
          Effect.as(Effect.logWarning("Slack: could not look a delivery up", cause), "unknown" as const)
        ),
        Effect.withSpan("Slack.reconcile", { attributes: { channel: options.channel } })
      )

    const connector: SlackConnector = {
      channel: options.channel,
      kind: "slack",
      maxMessageLength: options.maxMessageLength ?? 4000,
      commandPrefix: "!",
      self: { mentionPatterns: [], mentionIds: [bot.userId.toLowerCase()] },
      bot,
      inboundUrl: `http://${host}:${address.port}${path}`,
      start: (s) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            sink = s
          }),
          () =>
            Effect.sync(() => {
              sink = undefined
            })
        ),
      send,
      reconcile
    }
    return connector
  }).pipe(Effect.withSpan("Slack.make"))

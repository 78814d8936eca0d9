/**
 * The `ChannelStore` port: everything the channel layer must remember across restarts.
 *
 * - **Inbound dedupe** by (channel, platform message id): a platform's retry never starts a second run.
 * - **Pairing codes**, stored as a SHA-256 digest only, single use, with an expiry.
 * - **Identity bindings**: a platform identity → the principal it acts as; optional expiry; revocable.
 * - **Attempt counters** and lockouts for pairing, and the time of the last "how to pair" hint.
 * - **The outbox**: every message the channel layer sends, with a deterministic idempotency key and a
 *   state (`pending | sent | unknown | failed`). `unknown` means a send was attempted and its outcome
 *   is not known (e.g. the process died mid-call): such a delivery is never re-sent blindly.
 * - **Approval codes**: the short code a chat user answers one approval with.
 * - **Run watches**: runs whose reply is still owed, so a restart picks them up again.
 * - **The rejections log**: counts per (channel, reason code), and nothing of the rejected message.
 *
 * `makeMemory`/`layerMemory` implement it in memory; `SqliteChannelStore` on a SQLite file. Both
 * pass the same contract tests. Every method takes its time as an argument (from Effect's `Clock`
 * at the caller), so `TestClock` drives expiries in tests. Storage failures are `JournalError`s.
 *
 * @since 0.1.0
 */
import { Errors } from "@palyra/core"
import { Context, Effect, Layer, Option } from "effect"
import type { Reason } from "./Rejection.js"
import type { Identity } from "./SessionKey.js"

/** @since 0.1.0 @category Models */
export interface Binding extends Identity {
  readonly principal: string
  readonly createdAt: number
  /** Who made it: `pairing-code` or the operator's principal. */
  readonly createdBy: string
  readonly expiresAt: number | null
  readonly revokedAt: number | null
}

/** A binding that applies at `now`. @since 0.1.0 @category Predicates */
export const isActive = (b: Binding, now: number): boolean =>
  b.revokedAt === null && (b.expiresAt === null || now < b.expiresAt)

/** @since 0.1.0 @category Models */
export interface PairingCode {
  /** SHA-256 digest of the code (`Codes.digest`); the code itself is never stored. */
  readonly digest: string
  readonly channel: string
  readonly principal: string
  readonly createdBy: string
  readonly createdAt: number
  readonly expiresAt: number
  /** How long the binding made with this code lasts (ms), if limited. */
  readonly bindingTtlMs: number | null
  readonly usedAt: number | null
  /** When an operator revoked it (unset: never). */
  readonly revokedAt?: number | null | undefined
}

/** @since 0.1.0 @category Models */
export interface Attempts {
  /** Wrong codes since `windowStart`. */
  readonly failures: number
  readonly windowStart: number
  readonly lockedUntil: number | null
  readonly lastHintAt: number | null
}

/** @since 0.1.0 @category Models */
export interface LockoutPolicy {
  readonly maxFailures: number
  readonly windowMs: number
  readonly lockoutMs: number
}

/** @since 0.1.0 @category Models */
export type DeliveryState = "pending" | "sent" | "unknown" | "failed"

/** A message to send, as the router enqueues it. @since 0.1.0 @category Models */
export interface NewDelivery {
  /** Deterministic per (session, run, part) — or per (inbound message, part) for direct answers. */
  readonly key: string
  readonly channel: string
  readonly account: string
  readonly conversation: string
  readonly thread: string | null
  /** The platform message this answers, if any. */
  readonly replyTo: string | null
  readonly sessionId: string | null
  readonly runId: string | null
  readonly part: string
  readonly text: string
  readonly createdAt: number
}

/** @since 0.1.0 @category Models */
export interface Delivery extends NewDelivery {
  /** Insertion order. */
  readonly seq: number
  readonly state: DeliveryState
  readonly attempts: number
  readonly nextAttemptAt: number
  readonly platformMessageId: string | null
  readonly error: string | null
  readonly updatedAt: number
}

/** @since 0.1.0 @category Models */
export interface DeliveryPatch {
  readonly state: DeliveryState
  readonly attempts?: number | undefined
  readonly nextAttemptAt?: number | undefined
  readonly platformMessageId?: string | null | undefined
  readonly error?: string | null | undefined
}

/** @since 0.1.0 @category Models */
export interface DeliveryFilter {
  readonly channel?: string | undefined
  readonly state?: DeliveryState | undefined
  readonly sessionId?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface ApprovalCode {
  readonly code: string
  readonly approvalId: string
  readonly channel: string
  readonly conversation: string
  readonly principal: string
  readonly createdAt: number
  readonly expiresAt: number
}

/** A run whose reply is owed to a conversation. @since 0.1.0 @category Models */
export interface Watch extends Identity {
  readonly runId: string
  readonly sessionId: string
  readonly principal: string
  readonly conversation: string
  readonly thread: string | null
  readonly replyTo: string | null
  readonly createdAt: number
}

/** @since 0.1.0 @category Models */
export interface RejectionCount {
  readonly channel: string
  readonly reason: Reason
  readonly count: number
  readonly lastAt: number
}

type R<A> = Effect.Effect<A, Errors.JournalError>

/** @since 0.1.0 @category Models */
export interface Service {
  /** Record the first sighting of a platform message: true the first time, false for a repeat. */
  readonly claimInbound: (channel: string, platformMessageId: string, at: number) => R<boolean>
  /** Forget sightings older than `before` (they can no longer be retried by the platform). */
  readonly pruneInbound: (before: number) => R<number>

  readonly putPairingCode: (code: PairingCode) => Effect.Effect<void, Errors.JournalError | Errors.Conflict>
  /**
   * Atomically: if the code is for `channel`, unused and unexpired at `at`, mark it used and bind
   * `identity` to its principal. None otherwise (nothing changes).
   */
  readonly redeemPairingCode: (input: {
    readonly digest: string
    readonly identity: Identity
    readonly at: number
  }) => R<Option.Option<Binding>>
  /** Pairing codes (of a channel), newest first. */
  readonly listPairingCodes: (filter: { readonly channel?: string | undefined }) => R<ReadonlyArray<PairingCode>>
  /** Revoke a code that is unused and not revoked yet; None when there is no such code. */
  readonly revokePairingCode: (digest: string, at: number) => R<Option.Option<PairingCode>>
  /** Bind an identity directly (replacing any binding it had). */
  readonly putBinding: (binding: Binding) => R<void>
  /** The identity's binding if it applies at `at`. */
  readonly getBinding: (identity: Identity, at: number) => R<Option.Option<Binding>>
  /** Revoke the identity's active binding; returns it as revoked. */
  readonly revokeBinding: (identity: Identity, at: number) => R<Option.Option<Binding>>
  readonly listBindings: (filter: {
    readonly channel?: string | undefined
    readonly principal?: string | undefined
  }) => R<ReadonlyArray<Binding>>

  readonly getAttempts: (identity: Identity) => R<Option.Option<Attempts>>
  /** Count a wrong code; lock the identity out when the policy says so. Returns the new counters. */
  readonly recordFailure: (identity: Identity, at: number, policy: LockoutPolicy) => R<Attempts>
  readonly clearFailures: (identity: Identity) => R<void>
  /** True (and recorded) when no hint went to this identity within `intervalMs` before `at`. */
  readonly claimHint: (identity: Identity, at: number, intervalMs: number) => R<boolean>

  /** Add deliveries; one whose key exists already is left alone (false in its slot). */
  readonly enqueue: (deliveries: ReadonlyArray<NewDelivery>) => R<ReadonlyArray<boolean>>
  /**
   * Deliveries of `channel` to send now, oldest first: the oldest pending delivery of each
   * conversation, when it is due at `now` (so a conversation's messages never overtake each other).
   */
  readonly due: (channel: string, now: number, limit: number) => R<ReadonlyArray<Delivery>>
  /** When the first of those heads is due, if there is a pending delivery at all. */
  readonly nextDueAt: (channel: string) => R<Option.Option<number>>
  readonly updateDelivery: (key: string, patch: DeliveryPatch, at: number) => R<void>
  readonly listDeliveries: (filter: DeliveryFilter) => R<ReadonlyArray<Delivery>>

  /** Store a code for an approval, or return the one it has already. Conflict: the code is taken. */
  readonly putApprovalCode: (code: ApprovalCode) => Effect.Effect<ApprovalCode, Errors.JournalError | Errors.Conflict>
  readonly getApprovalCode: (code: string) => R<Option.Option<ApprovalCode>>

  readonly putWatch: (watch: Watch) => R<void>
  readonly endWatch: (runId: string) => R<void>
  readonly listWatches: (channel: string) => R<ReadonlyArray<Watch>>

  readonly recordRejection: (channel: string, reason: Reason, at: number) => R<void>
  readonly rejections: (channel?: string) => R<ReadonlyArray<RejectionCount>>
}

/** @since 0.1.0 @category Tags */
export class ChannelStore extends Context.Tag("@palyra/channels/ChannelStore")<ChannelStore, Service>() {}

/** The one string an identity is keyed by. @since 0.1.0 @category Utils */
export const identityKey = (i: Identity): string => JSON.stringify([i.channel, i.account, i.senderId])

/**
 * The identity a channel's pairing attempts are counted under, all senders together (the
 * channel-wide cap): an account no platform uses (it holds a NUL).
 *
 * @since 0.1.0
 * @category Utils
 */
export const channelAttempts = (channel: string): Identity => ({ channel, account: "\u0000channel", senderId: "*" })

/** Next counters after one wrong code. Shared by both implementations. @since 0.1.0 @category Utils */
export const nextAttempts = (previous: Attempts | undefined, at: number, policy: LockoutPolicy): Attempts => {
  const fresh = previous === undefined || at - previous.windowStart >= policy.windowMs
  const failures = (fresh ? 0 : previous.failures) + 1
  const locked = failures >= policy.maxFailures
  return {
    failures: locked ? 0 : failures,
    windowStart: fresh || locked ? at : previous.windowStart,
    lockedUntil: locked ? at + policy.lockoutMs : (previous?.lockedUntil ?? null),
    lastHintAt: previous?.lastHintAt ?? null
  }
}

/**
 * An in-memory store: the same contract, nothing durable. For tests and embedding.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeMemory = (): Service => {
  const inbound = new Map<string, number>()
  const codes = new Map<string, PairingCode>()
  const bindings = new Map<string, Binding>()
  const attempts = new Map<string, Attempts>()
  const outbox = new Map<string, Delivery>()
  let seq = 0
  const approvalCodes = new Map<string, ApprovalCode>()
  const watches = new Map<string, Watch>()
  const rejections = new Map<string, RejectionCount>()
  const ok = <A>(f: () => A): R<A> => Effect.sync(f)
  /** The oldest pending delivery of each conversation of `channel`, by seq. */
  const heads = (channel: string) => {
    const first = new Map<string, Delivery>()
    for (const d of [...outbox.values()].sort((a, b) => a.seq - b.seq)) {
      if (d.channel === channel && d.state === "pending" && !first.has(d.conversation)) first.set(d.conversation, d)
    }
    return [...first.values()]
  }

  return {
    claimInbound: (channel, id, at) =>
      ok(() => {
        const k = JSON.stringify([channel, id])
        if (inbound.has(k)) return false
        inbound.set(k, at)
        return true
      }),
    pruneInbound: (before) =>
      ok(() => {
        let n = 0
        for (const [k, at] of inbound)
          if (at < before) {
            inbound.delete(k)
            n++
          }
        return n
      }),
    putPairingCode: (code) =>
      codes.has(code.digest)
        ? Effect.fail(new Errors.Conflict({ message: "pairing code already exists" }))
        : ok(() => void codes.set(code.digest, code)),
    redeemPairingCode: ({ digest, identity, at }) =>
      ok(() => {
        const code = codes.get(digest)
        if (
          code === undefined ||
          code.channel !== identity.channel ||
          code.usedAt !== null ||
          (code.revokedAt ?? null) !== null ||
          at >= code.expiresAt
        ) {
          return Option.none()
        }
        codes.set(digest, { ...code, usedAt: at })
        const binding: Binding = {
          ...identity,
          principal: code.principal,
          createdAt: at,
          createdBy: "pairing-code",
          expiresAt: code.bindingTtlMs === null ? null : at + code.bindingTtlMs,
          revokedAt: null
        }
        bindings.set(identityKey(identity), binding)
        attempts.delete(identityKey(identity))
        return Option.some(binding)
      }),
    listPairingCodes: (filter) =>
      ok(() =>
        [...codes.values()]
          .filter((c) => filter.channel === undefined || c.channel === filter.channel)
          .sort((a, b) => b.createdAt - a.createdAt)
      ),
    revokePairingCode: (digest, at) =>
      ok(() => {
        const code = codes.get(digest)
        if (code === undefined || code.usedAt !== null || (code.revokedAt ?? null) !== null) return Option.none()
        const revoked = { ...code, revokedAt: at }
        codes.set(digest, revoked)
        return Option.some(revoked)
      }),
    putBinding: (binding) => ok(() => void bindings.set(identityKey(binding), binding)),
    getBinding: (identity, at) =>
      ok(() => Option.filter(Option.fromNullable(bindings.get(identityKey(identity))), (b) => isActive(b, at))),
    revokeBinding: (identity, at) =>
      ok(() => {
        const b = bindings.get(identityKey(identity))
        if (b === undefined || !isActive(b, at)) return Option.none()
        const revoked = { ...b, revokedAt: at }
        bindings.set(identityKey(identity), revoked)
        return Option.some(revoked)
      }),
    listBindings: (filter) =>
      ok(() =>
        [...bindings.values()].filter(
          (b) =>
            (filter.channel === undefined || b.channel === filter.channel) &&
            (filter.principal === undefined || b.principal === filter.principal)
        )
      ),
    getAttempts: (identity) => ok(() => Option.fromNullable(attempts.get(identityKey(identity)))),
    recordFailure: (identity, at, policy) =>
      ok(() => {
        const next = nextAttempts(attempts.get(identityKey(identity)), at, policy)
        attempts.set(identityKey(identity), next)
        return next
      }),
    clearFailures: (identity) => ok(() => void attempts.delete(identityKey(identity))),
    claimHint: (identity, at, intervalMs) =>
      ok(() => {
        const k = identityKey(identity)
        const a = attempts.get(k)
        if (a?.lastHintAt != null && at - a.lastHintAt < intervalMs) return false
        attempts.set(k, { failures: 0, windowStart: at, lockedUntil: null, ...a, lastHintAt: at })
        return true
      }),
    enqueue: (deliveries) =>
      ok(() =>
        deliveries.map((d) => {
          if (outbox.has(d.key)) return false
          outbox.set(d.key, {
            ...d,
            seq: ++seq,
            state: "pending",
            attempts: 0,
            nextAttemptAt: d.createdAt,
            platformMessageId: null,
            error: null,
            updatedAt: d.createdAt
          })
          return true
        })
      ),
    due: (channel, now, limit) =>
      ok(() =>
        heads(channel)
          .filter((d) => d.nextAttemptAt <= now)
          .slice(0, limit)
      ),
    nextDueAt: (channel) =>
      ok(() => {
        const all = heads(channel)
        return all.length === 0 ? Option.none() : Option.some(Math.min(...all.map((d) => d.nextAttemptAt)))
      }),
    updateDelivery: (key, patch, at) =>
      ok(() => {
        const d = outbox.get(key)
        if (d === undefined) return
        outbox.set(key, {
          ...d,
          state: patch.state,
          attempts: patch.attempts ?? d.attempts,
          nextAttemptAt: patch.nextAttemptAt ?? d.nextAttemptAt,
          platformMessageId: patch.platformMessageId === undefined ? d.platformMessageId : patch.platformMessageId,
          error: patch.error === undefined ? d.error : patch.error,
          updatedAt: at
        })
      }),
    listDeliveries: (filter) =>
      ok(() =>
        [...outbox.values()]
          .filter(
            (d) =>
              (filter.channel === undefined || d.channel === filter.channel) &&
              (filter.state === undefined || d.state === filter.state) &&
              (filter.sessionId === undefined || d.sessionId === filter.sessionId)
          )
          .sort((a, b) => a.seq - b.seq)
      ),
    putApprovalCode: (code) =>
      Effect.suspend(() => {
        for (const c of approvalCodes.values()) if (c.approvalId === code.approvalId) return Effect.succeed(c)
        if (approvalCodes.has(code.code)) return Effect.fail(new Errors.Conflict({ message: "approval code taken" }))
        approvalCodes.set(code.code, code)
        return Effect.succeed(code)
      }),
    getApprovalCode: (code) => ok(() => Option.fromNullable(approvalCodes.get(code))),
    putWatch: (watch) => ok(() => void watches.set(watch.runId, watch)),
    endWatch: (runId) => ok(() => void watches.delete(runId)),
    listWatches: (channel) => ok(() => [...watches.values()].filter((w) => w.channel === channel)),
    recordRejection: (channel, reason, at) =>
      ok(() => {
        const k = JSON.stringify([channel, reason])
        const c = rejections.get(k)
        rejections.set(k, { channel, reason, count: (c?.count ?? 0) + 1, lastAt: at })
      }),
    rejections: (channel) =>
      ok(() => [...rejections.values()].filter((r) => channel === undefined || r.channel === channel))
  }
}

/** @since 0.1.0 @category Layers */
export const layerMemory: Layer.Layer<ChannelStore> = Layer.sync(ChannelStore, makeMemory)

/**
 * Human approvals. A run that needs one waits on `await`, durably: the pending record is in the
 * journal, so a fresh process can wait on it again after a restart. `resolve` is a compare-and-set
 * on the approval id (exactly one of many concurrent resolutions wins) and wakes the waiting run.
 * An approval past its expiry can no longer be approved; the waiting call ends as denied.
 *
 * @since 0.1.0
 */
import { Clock, Context, Deferred, Duration, Effect, Layer, Option, PubSub, type Scope, Stream } from "effect"
import { Conflict, type JournalError, NotFound } from "../domain/Errors.js"
import type { ApprovalId, SessionId } from "../domain/Ids.js"
import { type ApprovalFilter, type ApprovalRecord, isActiveGrant } from "../domain/Records.js"
import type { ApprovalScope } from "../domain/TapeEvent.js"
import { Journal } from "../ports/Journal.js"

/** @since 0.1.0 @category Models */
export interface ResolveRequest {
  readonly approvalId: ApprovalId
  readonly decision: "approve" | "deny"
  /** How far an approval reaches: this call only, the rest of the session, or always (a narrow grant). */
  readonly scope?: ApprovalScope | undefined
  readonly by: string
  readonly reason?: string | undefined
  /** For `session`/`always` grants: stop applying at this time (epoch ms). */
  readonly grantExpiresAt?: number | undefined
  /** For `session`/`always` grants: allow at most this many calls. */
  readonly grantMaxUses?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface GrantQuery {
  readonly sessionId: SessionId
  readonly principal: string
  readonly tool: string
  readonly argsDigest: string
}

/** @since 0.1.0 @category Models */
export interface Service {
  /** Wait until the approval is resolved or expires; returns the final record. */
  readonly await: (id: ApprovalId) => Effect.Effect<ApprovalRecord, JournalError | NotFound>
  readonly resolve: (request: ResolveRequest) => Effect.Effect<ApprovalRecord, JournalError | NotFound | Conflict>
  readonly get: (id: ApprovalId) => Effect.Effect<Option.Option<ApprovalRecord>, JournalError>
  readonly list: (filter: ApprovalFilter) => Effect.Effect<ReadonlyArray<ApprovalRecord>, JournalError>
  /**
   * An earlier approval that covers this call: `session` scope for the same tool in the same session,
   * or `always` scope for the same principal, tool and exact arguments.
   */
  readonly findGrant: (query: GrantQuery) => Effect.Effect<Option.Option<ApprovalRecord>, JournalError>
  /** Every approval resolved or expired through this service, from the moment the stream is run. */
  readonly resolutions: Stream.Stream<ApprovalRecord>
  /** `resolutions`, subscribed when the effect completes (nothing published later is missed) until the scope closes. */
  readonly subscribeResolutions: Effect.Effect<Stream.Stream<ApprovalRecord>, never, Scope.Scope>
  /** Tell `resolutions` about an approval closed elsewhere (its run ended while it waited). */
  readonly announce: (record: ApprovalRecord) => Effect.Effect<void>
}

/** @since 0.1.0 @category Tags */
export class Approvals extends Context.Tag("@palyra/core/Approvals")<Approvals, Service>() {}

/** @since 0.1.0 @category Constructors */
export const make: Effect.Effect<Service, never, Journal> = Effect.gen(function* () {
  const journal = yield* Journal
  const waiters = new Map<ApprovalId, Deferred.Deferred<ApprovalRecord>>()
  const resolved = yield* PubSub.unbounded<ApprovalRecord>()

  const requireApproval = (id: ApprovalId) =>
    journal.getApproval(id).pipe(
      Effect.flatMap(
        Option.match({
          onNone: () => Effect.fail(new NotFound({ entity: "approval", id })),
          onSome: Effect.succeed
        })
      )
    )

  const wake = (record: ApprovalRecord) =>
    Effect.suspend(() => {
      const d = waiters.get(record.id)
      return d ? Deferred.succeed(d, record) : Effect.void
    }).pipe(Effect.zipRight(PubSub.publish(resolved, record)))

  const expire = (id: ApprovalId) =>
    Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      return yield* journal
        .resolveApproval(id, {
          status: "expired",
          scope: "once",
          resolver: "system",
          reason: "approval expired before anyone answered",
          resolvedAt: now
        })
        .pipe(Effect.tap(wake))
    })

  const awaitApproval: Service["await"] = (id) =>
    Effect.gen(function* () {
      const deferred = waiters.get(id) ?? (yield* Deferred.make<ApprovalRecord>())
      waiters.set(id, deferred)
      const record = yield* requireApproval(id)
      if (record.status !== "pending") return record
      const now = yield* Clock.currentTimeMillis
      const outcome = yield* Deferred.await(deferred).pipe(
        Effect.timeoutOption(Duration.millis(Math.max(0, record.expiresAt - now)))
      )
      if (Option.isSome(outcome)) return outcome.value
      // Expired: compare-and-set; if a resolution won the race, use it.
      return yield* expire(id).pipe(Effect.catchTag("Conflict", () => requireApproval(id)))
    }).pipe(Effect.ensuring(Effect.sync(() => waiters.delete(id))))

  const resolve: Service["resolve"] = Effect.fn("Approvals.resolve")(function* (request: ResolveRequest) {
    yield* Effect.annotateCurrentSpan("approvalId", request.approvalId)
    const record = yield* requireApproval(request.approvalId)
    if (record.status !== "pending") {
      return yield* new Conflict({ message: `approval ${record.id} is already ${record.status}` })
    }
    const now = yield* Clock.currentTimeMillis
    if (now >= record.expiresAt) {
      yield* expire(record.id).pipe(Effect.ignore)
      return yield* new Conflict({ message: `approval ${record.id} expired` })
    }
    const resolved = yield* journal.resolveApproval(record.id, {
      status: request.decision === "approve" ? "approved" : "denied",
      scope: request.decision === "approve" ? (request.scope ?? "once") : "once",
      resolver: request.by,
      reason: request.reason ?? (request.decision === "approve" ? "approved" : "denied"),
      resolvedAt: now,
      grantExpiresAt: request.grantExpiresAt ?? null,
      grantMaxUses: request.grantMaxUses ?? null
    })
    yield* wake(resolved)
    return resolved
  })

  const findGrant: Service["findGrant"] = (q) =>
    Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const inSession = yield* journal.listApprovals({ sessionId: q.sessionId, status: "approved" })
      const sessionGrant = inSession.find((a) => a.scope === "session" && a.tool === q.tool && isActiveGrant(a, now))
      if (sessionGrant) return Option.some(sessionGrant)
      const all = yield* journal.listApprovals({ status: "approved" })
      return Option.fromNullable(
        all.find(
          (a) =>
            a.scope === "always" &&
            a.principal === q.principal &&
            a.tool === q.tool &&
            a.argsDigest === q.argsDigest &&
            isActiveGrant(a, now)
        )
      )
    })

  return {
    await: awaitApproval,
    resolve,
    get: (id) => journal.getApproval(id),
    list: (filter) => journal.listApprovals(filter),
    findGrant,
    resolutions: Stream.fromPubSub(resolved),
    subscribeResolutions: Effect.map(PubSub.subscribe(resolved), (queue) => Stream.fromQueue(queue)),
    announce: (record) => Effect.asVoid(PubSub.publish(resolved, record))
  }
})

/** @since 0.1.0 @category Layers */
export const layer: Layer.Layer<Approvals, never, Journal> = Layer.effect(Approvals, make)

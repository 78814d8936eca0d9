import { Effect, PubSub, type Scope, Stream } from "effect"
import * as Caller from "../../domain/Caller.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ApprovalRecord } from "../../domain/Records.js"

/**
 * Who can answer approvals right now. A run that needs an approval waits only when someone can
 * answer it (fail closed otherwise): an operator watching every session, the principal watching its
 * own sessions, or a client streaming the session itself.
 * @internal
 */
export interface Approvers {
  /** Count `caller` as an approval channel (for `sessionId` only, when given) until the scope closes. */
  readonly register: (caller: Caller.Caller, sessionId?: SessionId) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Count `caller` as an approval channel now; the returned function stops counting it (calling it
   * again does nothing). For a run's own stream, which ends in a callback: no scope to build per run.
   */
  readonly hold: (caller: Caller.Caller, sessionId?: SessionId) => () => void
  /** Whether anyone can answer an approval in this session of this principal. */
  readonly has: (sessionId: SessionId, principal: string) => boolean
  /** Announce an approval a run now waits for. */
  readonly publish: (record: ApprovalRecord) => Effect.Effect<void>
  /** Approvals `caller` may answer, from now on, while the stream is consumed (which registers it). */
  readonly watch: (caller: Caller.Caller) => Stream.Stream<ApprovalRecord>
  /**
   * Like `watch`, but subscribed and registered when the effect completes (not when the stream is
   * first pulled): nothing published after that is missed. Both end with the scope.
   */
  readonly subscribe: (caller: Caller.Caller) => Effect.Effect<Stream.Stream<ApprovalRecord>, never, Scope.Scope>
}

const bump = <K>(map: Map<K, number>, key: K, delta: number) => {
  const n = (map.get(key) ?? 0) + delta
  if (n <= 0) map.delete(key)
  else map.set(key, n)
}

/** @internal */
export const makeApprovers: Effect.Effect<Approvers> = Effect.gen(function* () {
  let operators = 0
  const principals = new Map<string, number>()
  const sessions = new Map<SessionId, number>()
  const requests = yield* PubSub.unbounded<ApprovalRecord>()

  const change = (caller: Caller.Caller, sessionId: SessionId | undefined, delta: number) => {
    if (sessionId !== undefined) bump(sessions, sessionId, delta)
    else if (caller.operator) operators += delta
    else bump(principals, caller.principal, delta)
  }
  const register: Approvers["register"] = (caller, sessionId) =>
    Effect.acquireRelease(
      Effect.sync(() => change(caller, sessionId, 1)),
      () => Effect.sync(() => change(caller, sessionId, -1))
    )
  const hold: Approvers["hold"] = (caller, sessionId) => {
    change(caller, sessionId, 1)
    let held = true
    return () => {
      if (!held) return
      held = false
      change(caller, sessionId, -1)
    }
  }

  const subscribe: Approvers["subscribe"] = (caller) =>
    Effect.gen(function* () {
      const queue = yield* PubSub.subscribe(requests)
      yield* register(caller)
      return Stream.fromQueue(queue).pipe(Stream.filter((record) => Caller.owns(caller, record.principal)))
    })

  return {
    register,
    hold,
    has: (sessionId, principal) =>
      operators > 0 || (sessions.get(sessionId) ?? 0) > 0 || (principals.get(principal) ?? 0) > 0,
    publish: (record) => Effect.asVoid(PubSub.publish(requests, record)),
    watch: (caller) => Stream.unwrapScoped(subscribe(caller)),
    subscribe
  }
})

/**
 * A real, non-durable `Journal` held in process memory: the default of the Promise API and the test
 * kit. Same contract as the SQLite journal (the contract suite runs on both); no hash chain, since
 * nothing in process memory is tamper-evident anyway.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Option } from "effect"
import { Conflict, NotFound, PayloadTooLarge } from "../domain/Errors.js"
import type { ApprovalId, RunId, SessionId } from "../domain/Ids.js"
import { type ApprovalRecord, isActiveGrant, type Run, type Session } from "../domain/Records.js"
import { isTerminal } from "../domain/RunState.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import { type Checkpoint, Journal, type Service } from "../ports/Journal.js"

const clampLimit = (limit: number | undefined) => (limit === undefined ? Number.POSITIVE_INFINITY : Math.max(0, limit))

/**
 * An upper bound of `value`'s JSON size in UTF-8 bytes, or a number over `limit` once the bound
 * passes it (the walk stops there). A string unit is at most 6 bytes (`\uXXXX`), a number at most 24
 * characters; anything else (a `toJSON`, a bigint) is not bounded (`Infinity`: measure it).
 */
const encodedBound = (value: unknown, limit: number, depth = 0): number => {
  switch (typeof value) {
    case "string":
      return value.length * 6 + 2
    case "number":
      return 24
    case "boolean":
      return 5
    case "undefined":
      return 0
    case "object": {
      if (value === null) return 4
      if (depth > 32 || "toJSON" in value) return Number.POSITIVE_INFINITY
      let size = 2
      if (Array.isArray(value)) {
        for (const item of value) {
          // An `undefined` item (or a hole) is written as `null`.
          size += (item === undefined ? 4 : encodedBound(item, limit, depth + 1)) + 1
          if (size > limit) return size
        }
        return size
      }
      for (const key in value) {
        size += key.length * 6 + 4 + encodedBound((value as Record<string, unknown>)[key], limit, depth + 1)
        if (size > limit) return size
      }
      return size
    }
    default:
      return Number.POSITIVE_INFINITY
  }
}

/** Options of the in-memory journal. @since 0.1.0 @category Models */
export interface MemoryOptions {
  /** Largest encoded event accepted, in bytes (default 1 MiB). */
  readonly maxEventBytes?: number | undefined
}

/** A real, non-durable journal held in memory. @since 0.1.0 @category Constructors */
export const make = (options: MemoryOptions = {}): Effect.Effect<Service> =>
  Effect.gen(function* () {
    const maxEventBytes = options.maxEventBytes ?? 1024 * 1024
    // Every write below is one synchronous step (an `Effect.suspend` that checks and applies in
    // plain code), so no other fiber can interleave with it: it is atomic without a lock. (A
    // semaphore here cost a dozen fiber steps per append, on the loop's hot path in tests and benches.)
    const atomically = <A, E>(write: Effect.Effect<A, E>): Effect.Effect<A, E> => write
    const tapes = new Map<SessionId, Array<TapeEvent>>()
    const sessions = new Map<SessionId, Session>()
    const runs = new Map<RunId, Run>()
    const approvals = new Map<ApprovalId, ApprovalRecord>()
    const checkpoints = new Map<string, Checkpoint>()

    /** Why this session cannot be created (its id exists, or its principal's key is taken), if so. */
    const keyTaken = (session: Session): string | undefined => {
      if (sessions.has(session.id)) return `session ${session.id} exists`
      if (session.key !== null) {
        for (const s of sessions.values()) {
          if (s.principal === session.principal && s.key === session.key && !s.archived) return "session key is taken"
        }
      }
      return undefined
    }

    const append: Service["append"] = (sessionId, events, effects = {}) =>
      atomically(
        Effect.suspend((): Effect.Effect<ReadonlyArray<TapeEvent>, NotFound | PayloadTooLarge | Conflict> => {
          const created = effects.createSession
          if (created !== undefined) {
            const taken =
              created.id !== sessionId ? `session ${created.id} is not the append's session` : keyTaken(created)
            if (taken) return Effect.fail(new Conflict({ message: taken }))
          }
          const session = created ?? sessions.get(sessionId)
          if (session === undefined) return Effect.fail(new NotFound({ entity: "session", id: sessionId }))
          const tape = tapes.get(sessionId) ?? []
          let seq = tape.length === 0 ? 0 : tape[tape.length - 1]!.tapeSeq
          const staged = events.map((e) => ({ ...e, tapeSeq: ++seq }) as TapeEvent)
          for (const e of staged) {
            // Most events are far below the limit: a bound of their encoded size (no string built)
            // settles it; only one that could be over it is encoded and measured.
            if (encodedBound(e, maxEventBytes) <= maxEventBytes) continue
            // A UTF-16 unit is at most 3 UTF-8 bytes: count bytes only when that bound is over the limit.
            const json = JSON.stringify(e)
            const size = json.length * 3 <= maxEventBytes ? json.length : Buffer.byteLength(json)
            if (size > maxEventBytes) {
              return Effect.fail(new PayloadTooLarge({ what: `${e._tag} event`, size, limit: maxEventBytes }))
            }
          }
          if (effects.createRun && runs.has(effects.createRun.id)) {
            return Effect.fail(new Conflict({ message: `run ${effects.createRun.id} exists` }))
          }
          if (effects.createApproval && approvals.has(effects.createApproval.id)) {
            return Effect.fail(new Conflict({ message: `approval ${effects.createApproval.id} exists` }))
          }
          const c = effects.createCheckpoint
          if (c && (checkpoints.has(c.id) || c.sessionId !== sessionId)) {
            return Effect.fail(new Conflict({ message: `checkpoint ${c.id} exists or belongs to another session` }))
          }
          const t = effects.runTransition
          const run = t
            ? (runs.get(t.runId) ?? (effects.createRun?.id === t.runId ? effects.createRun : undefined))
            : undefined
          if (t) {
            if (run === undefined) return Effect.fail(new NotFound({ entity: "run", id: t.runId }))
            if (run.state !== t.from) {
              return Effect.fail(new Conflict({ message: `run ${t.runId} is ${run.state}, expected ${t.from}` }))
            }
          }
          // All checks passed: apply everything (the in-memory "transaction").
          tapes.set(sessionId, tape)
          const stored: Array<TapeEvent> = []
          for (const event of staged) {
            tape.push(event)
            stored.push(event)
          }
          const now = stored[stored.length - 1]!.at
          if (effects.createRun) runs.set(effects.createRun.id, effects.createRun)
          if (t && run) {
            runs.set(t.runId, {
              ...(runs.get(t.runId) ?? run),
              state: t.to,
              error: t.error ?? run.error,
              updatedAt: now,
              // The run's range ends with this append (its end event is its last): see `readRunTape`.
              ...(isTerminal(t.to) ? { endSeq: stored[stored.length - 1]!.tapeSeq } : {})
            })
          }
          if (effects.createApproval) approvals.set(effects.createApproval.id, effects.createApproval)
          if (c) checkpoints.set(c.id, c)
          sessions.set(sessionId, {
            ...session,
            tokensUsed: session.tokensUsed + (effects.addTokens ?? 0),
            updatedAt: now
          })
          return Effect.succeed(stored as ReadonlyArray<TapeEvent>)
        })
      )

    const readTape: Service["readTape"] = (sessionId, o) =>
      Effect.sync(() => {
        const tape = tapes.get(sessionId) ?? []
        const out: Array<TapeEvent> = []
        const limit = clampLimit(o.limit)
        // tapeSeq n sits at index n - 1.
        for (let i = Math.max(0, o.afterSeq); i < tape.length && out.length < limit; i++) {
          const e = tape[i]!
          if (o.uptoSeq !== undefined && e.tapeSeq > o.uptoSeq) break
          if (o.runId !== undefined && e.runId !== o.runId) continue
          out.push(e)
        }
        return out
      })

    const service: Service = {
      append,
      readTape,
      headSeq: (sessionId) => Effect.sync(() => tapes.get(sessionId)?.length ?? 0),
      createSession: (session) =>
        atomically(
          Effect.suspend(() => {
            const taken = keyTaken(session)
            if (taken) return Effect.fail(new Conflict({ message: taken }))
            sessions.set(session.id, session)
            return Effect.void
          })
        ),
      getSession: (id) => Effect.sync(() => Option.fromNullable(sessions.get(id))),
      findSessionByKey: (principal, key) =>
        Effect.sync(() =>
          Option.fromNullable(
            [...sessions.values()].find((s) => s.principal === principal && s.key === key && !s.archived)
          )
        ),
      updateSession: (session) =>
        atomically(
          Effect.suspend(() => {
            const current = sessions.get(session.id)
            if (current === undefined) return Effect.fail(new NotFound({ entity: "session", id: session.id }))
            // The token counter is owned by appends (never rolled back); the agent is fixed at creation.
            sessions.set(session.id, { ...session, tokensUsed: current.tokensUsed, agentId: current.agentId })
            return Effect.void
          })
        ),
      listSessions: (f) =>
        Effect.sync(() =>
          [...sessions.values()]
            .filter(
              (s) => (f.principal === undefined || s.principal === f.principal) && (f.includeArchived || !s.archived)
            )
            .sort((a, b) => b.updatedAt - a.updatedAt || (a.id < b.id ? 1 : -1))
            .slice(0, clampLimit(f.limit))
        ),
      getRun: (id) => Effect.sync(() => Option.fromNullable(runs.get(id))),
      listRuns: (f) =>
        Effect.sync(() =>
          [...runs.values()]
            .filter(
              (r) =>
                (f.sessionId === undefined || r.sessionId === f.sessionId) &&
                (f.principal === undefined || r.principal === f.principal) &&
                (f.states === undefined || f.states.includes(r.state))
            )
            .sort((a, b) => (a.id < b.id ? -1 : 1))
            .slice(0, clampLimit(f.limit))
        ),
      resolveApproval: (id, r) =>
        atomically(
          Effect.suspend((): Effect.Effect<ApprovalRecord, NotFound | Conflict> => {
            const current = approvals.get(id)
            if (current === undefined) return Effect.fail(new NotFound({ entity: "approval", id }))
            if (current.status !== "pending") {
              return Effect.fail(new Conflict({ message: `approval ${id} is already ${current.status}` }))
            }
            const next: ApprovalRecord = {
              ...current,
              status: r.status,
              scope: r.scope,
              resolver: r.resolver,
              reason: r.reason,
              resolvedAt: r.resolvedAt,
              grantExpiresAt: r.grantExpiresAt ?? null,
              grantMaxUses: r.grantMaxUses ?? null
            }
            approvals.set(id, next)
            return Effect.succeed(next)
          })
        ),
      getApproval: (id) => Effect.sync(() => Option.fromNullable(approvals.get(id))),
      useGrant: (id, now) =>
        atomically(
          Effect.suspend((): Effect.Effect<ApprovalRecord, NotFound | Conflict> => {
            const current = approvals.get(id)
            if (current === undefined) return Effect.fail(new NotFound({ entity: "approval", id }))
            if (!isActiveGrant(current, now)) {
              return Effect.fail(new Conflict({ message: `grant ${id} no longer applies` }))
            }
            const next = { ...current, grantUses: current.grantUses + 1 }
            approvals.set(id, next)
            return Effect.succeed(next)
          })
        ),
      revokeGrant: (id, by, at) =>
        atomically(
          Effect.suspend((): Effect.Effect<ApprovalRecord, NotFound | Conflict> => {
            const current = approvals.get(id)
            if (current === undefined) return Effect.fail(new NotFound({ entity: "approval", id }))
            if (current.status !== "approved" || current.scope === "once") {
              return Effect.fail(new Conflict({ message: `approval ${id} is not a standing grant` }))
            }
            const next: ApprovalRecord = { ...current, status: "revoked", reason: `revoked by ${by}`, resolvedAt: at }
            approvals.set(id, next)
            return Effect.succeed(next)
          })
        ),
      listApprovals: (f) =>
        Effect.sync(() =>
          [...approvals.values()]
            .filter(
              (a) =>
                (f.sessionId === undefined || a.sessionId === f.sessionId) &&
                (f.runId === undefined || a.runId === f.runId) &&
                (f.status === undefined || a.status === f.status)
            )
            .sort((a, b) => (a.id < b.id ? -1 : 1))
            .slice(0, clampLimit(f.limit))
        ),
      listCheckpoints: (sessionId) =>
        Effect.sync(() => [...checkpoints.values()].filter((c) => c.sessionId === sessionId)),
      getCheckpoint: (id) => Effect.sync(() => Option.fromNullable(checkpoints.get(id))),
      // Memory holds no hash chain (nothing in a process's own memory is tamper-proof); verify
      // checks what can break here: every session's tape is gap-free and ordered.
      verify: Effect.sync(() => {
        let checked = 0
        for (const [sessionId, tape] of tapes) {
          for (let i = 0; i < tape.length; i++) {
            checked++
            if (tape[i]!.tapeSeq !== i + 1) {
              return {
                ok: false as const,
                checked,
                sessionId,
                tapeSeq: tape[i]!.tapeSeq,
                reason: "reordered" as const,
                detail: `expected tapeSeq ${i + 1}`
              }
            }
          }
        }
        return { ok: true as const, checked }
      })
    }
    return service
  })

/** @since 0.1.0 @category Layers */
export const layer = (options: MemoryOptions = {}): Layer.Layer<Journal> => Layer.effect(Journal, make(options))

import { Effect, Option } from "effect"
import { canonicalJson, sha256 } from "../Canonical.js"
import { Conflict, NotFound, PayloadTooLarge } from "../Errors.js"
import type { ApprovalId, RunId, SessionId } from "../Ids.js"
import type { MemoryOptions, Service } from "../Journal.js"
import type { ApprovalRecord, Run, Session } from "../Records.js"
import type { TapeEvent } from "../TapeEvent.js"

interface StoredEvent {
  readonly event: TapeEvent
  readonly prevHash: string
  readonly hash: string
}

const GENESIS = "0".repeat(64)
const clampLimit = (limit: number | undefined) => (limit === undefined ? Number.POSITIVE_INFINITY : Math.max(0, limit))

/** @internal */
export const makeMemoryJournal = (options: MemoryOptions): Effect.Effect<Service> =>
  Effect.gen(function* () {
    const maxEventBytes = options.maxEventBytes ?? 1024 * 1024
    const lock = yield* Effect.makeSemaphore(1)
    const tapes = new Map<SessionId, Array<StoredEvent>>()
    const chain: Array<StoredEvent> = []
    const sessions = new Map<SessionId, Session>()
    const runs = new Map<RunId, Run>()
    const approvals = new Map<ApprovalId, ApprovalRecord>()
    let head = GENESIS

    const append: Service["append"] = (sessionId, events, effects = {}) =>
      lock.withPermits(1)(
        Effect.suspend((): Effect.Effect<ReadonlyArray<TapeEvent>, NotFound | PayloadTooLarge | Conflict> => {
          const session = sessions.get(sessionId)
          if (session === undefined) return Effect.fail(new NotFound({ entity: "session", id: sessionId }))
          for (const e of events) {
            const size = Buffer.byteLength(canonicalJson(e))
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
          const tape = tapes.get(sessionId) ?? []
          tapes.set(sessionId, tape)
          let seq = tape.length === 0 ? 0 : tape[tape.length - 1]!.event.tapeSeq
          const stored: Array<TapeEvent> = []
          for (const e of events) {
            const event = { ...e, tapeSeq: ++seq } as TapeEvent
            const hash = sha256(head + canonicalJson(event))
            const row = { event, prevHash: head, hash }
            head = hash
            tape.push(row)
            chain.push(row)
            stored.push(event)
          }
          const now = stored[stored.length - 1]!.at
          if (effects.createRun) runs.set(effects.createRun.id, effects.createRun)
          if (t && run) {
            runs.set(t.runId, {
              ...(runs.get(t.runId) ?? run),
              state: t.to,
              error: t.error ?? run.error,
              updatedAt: now
            })
          }
          if (effects.createApproval) approvals.set(effects.createApproval.id, effects.createApproval)
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
          const e = tape[i]!.event
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
        lock.withPermits(1)(
          Effect.suspend(() => {
            if (sessions.has(session.id)) return Effect.fail(new Conflict({ message: `session ${session.id} exists` }))
            if (session.key !== null) {
              for (const s of sessions.values()) {
                if (s.principal === session.principal && s.key === session.key && !s.archived) {
                  return Effect.fail(new Conflict({ message: `session key ${session.key} is taken` }))
                }
              }
            }
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
        lock.withPermits(1)(
          Effect.suspend(() => {
            const current = sessions.get(session.id)
            if (current === undefined) return Effect.fail(new NotFound({ entity: "session", id: session.id }))
            // The token counter is owned by appends; never roll it back.
            sessions.set(session.id, { ...session, tokensUsed: current.tokensUsed })
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
                (f.states === undefined || f.states.includes(r.state))
            )
            .sort((a, b) => (a.id < b.id ? -1 : 1))
            .slice(0, clampLimit(f.limit))
        ),
      resolveApproval: (id, r) =>
        lock.withPermits(1)(
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
              resolvedAt: r.resolvedAt
            }
            approvals.set(id, next)
            return Effect.succeed(next)
          })
        ),
      getApproval: (id) => Effect.sync(() => Option.fromNullable(approvals.get(id))),
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
      verify: Effect.sync(() => {
        let prev = GENESIS
        for (let i = 0; i < chain.length; i++) {
          const row = chain[i]!
          const expect = sha256(prev + canonicalJson(row.event))
          if (row.prevHash !== prev || row.hash !== expect) {
            return {
              ok: false as const,
              checked: i,
              sessionId: row.event.sessionId,
              tapeSeq: row.event.tapeSeq,
              reason: "edited" as const,
              detail: "hash does not match the row's contents"
            }
          }
          prev = row.hash
        }
        return { ok: true as const, checked: chain.length }
      })
    }
    return service
  })

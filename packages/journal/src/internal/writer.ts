import type Database from "better-sqlite3"
import { type RecordTable, rowHash, versionHash, versionOf } from "./chain.js"
import type { AppendOp, Op, OpResult, SessionCreation, WireEffects } from "./protocol.js"

/**
 * The journal's writer: every write to the journal's file, as plain synchronous functions over one
 * better-sqlite3 connection and already-redacted `Op`s. The same code runs inline (on the caller's
 * thread) or in a worker thread (`writer-worker.ts`); either way it is the only writer of the file in
 * this process, so it keeps the chain head and the session heads in memory.
 *
 * - Appends: one batch = one transaction (`BEGIN IMMEDIATE`). Session heads are read once per batch
 *   and written back once per session; only appends with compare-and-set effects get a savepoint of
 *   their own (a plain append cannot fail on its own: only the whole transaction can).
 * - Other writes (sessions, approvals, grants): each its own transaction with its record version.
 * @internal
 */
export interface Writer {
  /** Run ops in order: consecutive appends commit together (up to `maxBatch` a transaction). */
  readonly commit: (ops: ReadonlyArray<Op>) => Array<OpResult>
  /** The session's committed head (`null`: no such session). */
  readonly readHead: (sessionId: string) => number | null
}

/** Sessions whose head and last touch are kept in memory (the most recently written). */
const SESSION_CACHE = 4096

/** A typed refusal thrown inside a transaction (rolls its savepoint back). */
class Refusal {
  constructor(
    readonly tag: "Conflict" | "NotFound",
    readonly message: string,
    readonly entity?: string,
    readonly id?: string
  ) {}
}
const notFound = (entity: string, id: string) => new Refusal("NotFound", `${entity} ${id} not found`, entity, id)
const failed = (error: unknown): OpResult =>
  error instanceof Refusal
    ? { ok: false, tag: error.tag, message: error.message, entity: error.entity, id: error.id }
    : { ok: false, tag: "JournalError", message: error instanceof Error ? error.message : String(error) }

interface SessionHead {
  seq: number
  tokens: number
  lastAt: number
}

const hasEffects = (e: WireEffects) =>
  e.createRun !== undefined ||
  e.runTransition !== undefined ||
  e.createApproval !== undefined ||
  e.createCheckpoint !== undefined ||
  e.createSession !== undefined

/** @internal */
export const makeWriter = (db: Database.Database, maxBatch: number): Writer => {
  const st = {
    session: db.prepare("SELECT * FROM sessions WHERE id = ?"),
    sessionExists: db.prepare("SELECT 1 FROM sessions WHERE id = ?"),
    sessionByKey: db.prepare("SELECT 1 FROM sessions WHERE principal = ? AND key_digest = ? AND archived = 0"),
    insertSession: db.prepare(
      `INSERT INTO sessions (id, principal, key, key_digest, channel, title, parent_id, parent_seq, reset_generation,
          history_from_seq, tokens_used, archived, head_seq, created_at, updated_at, agent_id)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)`
    ),
    // A session read back carries its redacted key: writing that same text back keeps the digest.
    // (`@keyAsIs` says the key needed no redaction; the key itself never crosses to this thread.)
    updateSession: db.prepare(
      `UPDATE sessions SET key_digest = CASE WHEN @display IS NULL THEN NULL WHEN @keyAsIs = 1 AND key IS @display THEN key_digest ELSE @digest END,
          key = @display, channel = @channel, title = @title, reset_generation = @resetGeneration,
          history_from_seq = @historyFromSeq, archived = @archived, updated_at = @updatedAt WHERE id = @id`
    ),
    // A session's head is derived from the tape (`maxSeq`), so `sessions.head_seq` (from 0001) is
    // no longer written: a throttled copy would only be a stale second source of truth.
    afterAppend: db.prepare(
      "UPDATE sessions SET tokens_used = tokens_used + ?, updated_at = max(updated_at, ?) WHERE id = ?"
    ),
    insertEvent: db.prepare(
      `INSERT INTO tape_events (chain_seq, session_id, tape_seq, run_id, kind, created_at, payload, prev_hash, hash)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
    ),
    runState: db.prepare("SELECT state FROM runs WHERE id = ?"),
    run: db.prepare("SELECT * FROM runs WHERE id = ?"),
    insertRun: db.prepare(
      `INSERT INTO runs (id, session_id, principal, state, input, start_seq, error_code, error_message, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
    ),
    transitionRun: db.prepare(
      `UPDATE runs SET state = ?, error_code = coalesce(?, error_code), error_message = coalesce(?, error_message),
          updated_at = ? WHERE id = ? AND state = ?`
    ),
    approval: db.prepare("SELECT * FROM approvals WHERE id = ?"),
    insertApproval: db.prepare(
      `INSERT INTO approvals (id, session_id, run_id, tool_call_id, principal, tool, args_digest, risk, summary, status,
          scope, requested_at, expires_at, resolved_at, resolver, reason)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
    ),
    resolveApproval: db.prepare(
      `UPDATE approvals SET status = ?, scope = ?, resolver = ?, reason = ?, resolved_at = ?,
           grant_expires_at = ?, grant_max_uses = ?
         WHERE id = ? AND status = 'pending'`
    ),
    useGrant: db.prepare(
      `UPDATE approvals SET grant_uses = grant_uses + 1
         WHERE id = ? AND status = 'approved' AND scope != 'once'
           AND (grant_expires_at IS NULL OR ? < grant_expires_at)
           AND (grant_max_uses IS NULL OR grant_uses < grant_max_uses)`
    ),
    revokeGrant: db.prepare(
      `UPDATE approvals SET status = 'revoked', reason = ?, resolved_at = ?
         WHERE id = ? AND status = 'approved' AND scope != 'once'`
    ),
    checkpointExists: db.prepare("SELECT 1 FROM checkpoints WHERE id = ?"),
    insertCheckpoint: db.prepare(
      "INSERT INTO checkpoints (id, session_id, from_seq, to_seq, summary, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
    ),
    head: db.prepare("SELECT chain_seq, hash, count FROM chain_head WHERE id = 1"),
    setHead: db.prepare("UPDATE chain_head SET chain_seq = ?, hash = ?, count = ? WHERE id = 1"),
    // Both chains' heads in one statement: a batch that versioned records writes its heads once.
    setHeads: db.prepare(
      "UPDATE chain_head SET chain_seq = ?, hash = ?, count = ?, records_seq = ?, records_hash = ? WHERE id = 1"
    ),
    maxSeq: db.prepare("SELECT max(tape_seq) AS seq FROM tape_events WHERE session_id = ?"),
    // The record chain (records.ts): its head is read once (below) and written by each transaction
    // that versioned a row.
    recordHead: db.prepare("SELECT records_seq AS seq, records_hash AS hash FROM chain_head WHERE id = 1"),
    setRecordHead: db.prepare("UPDATE chain_head SET records_seq = ?, records_hash = ? WHERE id = 1"),
    insertVersion: db.prepare(
      "INSERT INTO record_versions (seq, tbl, row_id, digest, hints, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
  }
  const rowOf: Record<RecordTable, Database.Statement> = { sessions: st.session, runs: st.run, approvals: st.approval }
  // A transition to a terminal state also records the run's last seq (migration 0011); prepared on
  // first use, so a writer over a file at an older schema (a test writing one) still opens.
  let runEndStatement: Database.Statement | undefined
  const runEnd = () =>
    (runEndStatement ??= db.prepare(
      `UPDATE runs SET state = ?, error_code = coalesce(?, error_code), error_message = coalesce(?, error_message),
          updated_at = ?, end_seq = ? WHERE id = ? AND state = ?`
    ))

  // The record chain's head in memory, like the tape's (this writer is the only writer of the file
  // once it is open; migrations version their rows before it exists): a version moves it, the
  // transaction that wrote versions writes it back once (`setHeads` / `setRecordHead`), and a
  // rolled-back savepoint or transaction restores it. Two statements less per version.
  let records = st.recordHead.get() as { seq: number; hash: string }
  /** Append the current version of a row to the record chain. Call inside the transaction that wrote it. */
  const recordVersion = (table: RecordTable, id: string) => {
    const row = rowOf[table].get(id) as Record<string, unknown>
    const seq = records.seq + 1
    const version = versionOf(table, row)
    const hash = versionHash(records.hash, seq, table, id, version)
    st.insertVersion.run(seq, table, id, version.digest, version.hints, records.hash, hash)
    records = { seq, hash }
  }

  let head = st.head.get() as { chain_seq: number; hash: string; count: number }

  // Each session's head in memory: read once from the tape's index, then advanced by commits only.
  // The sessions row is touched only when tokens change or at most once a second per session (for
  // `updated_at` ordering). Both bounded (least recently used dropped): a dropped head is read again
  // from the index, a dropped touch time only means one more row update.
  const heads = new Map<string, number>()
  const touched = new Map<string, number>()
  const remember = (map: Map<string, number>, sessionId: string, value: number) => {
    map.delete(sessionId)
    map.set(sessionId, value)
    if (map.size > SESSION_CACHE) map.delete(map.keys().next().value!)
  }
  const readHead = (sessionId: string): number | null => {
    const cached = heads.get(sessionId)
    if (cached !== undefined) return cached
    if (!st.sessionExists.get(sessionId)) return null
    const seq = (st.maxSeq.get(sessionId) as { seq: number | null }).seq ?? 0
    remember(heads, sessionId, seq)
    return seq
  }

  /** Why a session cannot be created: its id exists, or its principal's key is taken. */
  const sessionRefusal = (id: string, s: SessionCreation): Refusal | undefined => {
    if (st.sessionExists.get(id)) return new Refusal("Conflict", `session ${id} exists`)
    if (s.digest !== null && st.sessionByKey.get(s.principal, s.digest)) {
      return new Refusal("Conflict", `session key ${s.params[2] as string} is taken`)
    }
    return undefined
  }

  const applyEffects = (p: AppendOp, at: number, lastSeq: number) => {
    const { createRun, runTransition, createApproval, createCheckpoint, createSession } = p.effects
    // The session first: everything else in the append belongs to it.
    if (createSession) {
      const refused = sessionRefusal(p.sessionId, createSession)
      if (refused) throw refused
      st.insertSession.run(...createSession.params)
      recordVersion("sessions", p.sessionId)
    }
    // First, so a later refusal in this append rolls the checkpoint back with the rest.
    if (createCheckpoint) {
      const id = createCheckpoint[0] as string
      if (createCheckpoint[1] !== p.sessionId || st.checkpointExists.get(id)) {
        throw new Refusal("Conflict", `checkpoint ${id} exists or belongs to another session`)
      }
      st.insertCheckpoint.run(...createCheckpoint)
    }
    const runId = createRun?.[0] as string | undefined
    if (createRun) {
      if (st.runState.get(runId)) throw new Refusal("Conflict", `run ${runId} exists`)
      st.insertRun.run(...createRun)
    }
    if (runTransition) {
      const t = runTransition
      const changed = t.ends
        ? runEnd().run(t.to, t.errorCode, t.errorMessage, at, lastSeq, t.runId, t.from).changes
        : st.transitionRun.run(t.to, t.errorCode, t.errorMessage, at, t.runId, t.from).changes
      if (changed === 0) {
        const current = st.runState.get(t.runId) as { state: string } | undefined
        if (current === undefined) throw notFound("run", t.runId)
        throw new Refusal("Conflict", `run ${t.runId} is ${current.state}, expected ${t.from}`)
      }
    }
    // One version per run per append, of its final state (admission creates and transitions it).
    if (runId !== undefined) recordVersion("runs", runId)
    if (runTransition && runTransition.runId !== runId) recordVersion("runs", runTransition.runId)
    if (createApproval) {
      const id = createApproval[0] as string
      if (st.approval.get(id)) throw new Refusal("Conflict", `approval ${id} exists`)
      st.insertApproval.run(...createApproval)
      recordVersion("approvals", id)
    }
  }
  const insertEvents = (p: AppendOp, h: SessionHead): number => {
    let { chain_seq: chainSeq, hash: prev, count } = head
    const first = h.seq + 1
    for (const e of p.events) {
      const seq = ++h.seq
      chainSeq++
      count++
      const hash = rowHash(prev, p.sessionId, seq, e.runId, e.tag, e.at, e.payload)
      st.insertEvent.run(chainSeq, p.sessionId, seq, e.runId, e.tag, e.at, e.payload, prev, hash)
      prev = hash
    }
    h.tokens += p.effects.addTokens ?? 0
    h.lastAt = Math.max(h.lastAt, p.events[p.events.length - 1]!.at)
    head = { chain_seq: chainSeq, hash: prev, count }
    return first
  }
  const withSavepoint = db.transaction((p: AppendOp, h: SessionHead) => {
    applyEffects(p, p.events[p.events.length - 1]!.at, h.seq + p.events.length)
    return insertEvents(p, h)
  })

  // BEGIN IMMEDIATE: the batch reads before it writes, and a deferred transaction that must upgrade
  // while another connection (a task queue or memory store on this file, another process) writes
  // fails at once with SQLITE_BUSY; an immediate one waits (busy_timeout). Made once: better-sqlite3's
  // `db.transaction` builds four wrappers each call (a few µs of a lone append's commit).
  const appendTransaction = db.transaction(
    (
      batch: ReadonlyArray<AppendOp>,
      results: Array<OpResult>,
      local: Map<string, SessionHead | null>,
      recordsBefore: { seq: number; hash: string }
    ) => {
      for (const p of batch) {
        let h = local.get(p.sessionId)
        if (p.effects.createSession !== undefined) {
          // A new session's first append: its head starts at 0 once the session row is in.
          const fresh = { seq: 0, tokens: 0, lastAt: -1 }
          const mark = { head, records }
          try {
            results.push({ ok: true, seq: withSavepoint(p, fresh) })
            local.set(p.sessionId, fresh)
          } catch (error) {
            // An I/O error (disk full…) rolled the whole transaction back, not just the savepoint:
            // the batch fails as one (nothing after it may commit outside a transaction).
            if (!db.inTransaction) throw error
            head = mark.head
            records = mark.records
            results.push(failed(error))
          }
          continue
        }
        if (h === undefined) {
          const seq = readHead(p.sessionId)
          h = seq === null ? null : { seq, tokens: 0, lastAt: -1 }
          local.set(p.sessionId, h)
        }
        if (h === null) {
          results.push(failed(notFound("session", p.sessionId)))
          continue
        }
        if (!hasEffects(p.effects)) {
          results.push({ ok: true, seq: insertEvents(p, h) })
          continue
        }
        const mark = { head, records, seq: h.seq, tokens: h.tokens, lastAt: h.lastAt }
        try {
          results.push({ ok: true, seq: withSavepoint(p, h) })
        } catch (error) {
          // As above: the transaction itself is gone, so is the batch.
          if (!db.inTransaction) throw error
          // The savepoint rolled this append back: so do the in-memory heads.
          head = mark.head
          records = mark.records
          h.seq = mark.seq
          h.tokens = mark.tokens
          h.lastAt = mark.lastAt
          results.push(failed(error))
        }
      }
      for (const [sessionId, h] of local) {
        if (h === null || h.lastAt < 0) continue
        const last = touched.get(sessionId) ?? Number.NEGATIVE_INFINITY
        if (h.tokens > 0 || h.lastAt - last >= 1000) {
          st.afterAppend.run(h.tokens, h.lastAt, sessionId)
          remember(touched, sessionId, h.lastAt)
        }
      }
      if (records === recordsBefore) st.setHead.run(head.chain_seq, head.hash, head.count)
      else st.setHeads.run(head.chain_seq, head.hash, head.count, records.seq, records.hash)
    }
  ).immediate

  const commitAppends = (batch: ReadonlyArray<AppendOp>): Array<OpResult> => {
    const before = head
    const recordsBefore = records
    const results: Array<OpResult> = []
    const local = new Map<string, SessionHead | null>()
    try {
      appendTransaction(batch, results, local, recordsBefore)
    } catch (error) {
      head = before
      records = recordsBefore
      const failure = failed(error)
      return batch.map(() => failure)
    }
    // Committed: advance the cached heads.
    for (const [sessionId, h] of local) if (h !== null) remember(heads, sessionId, h.seq)
    return results
  }

  // Writes outside the appends: the row write and its record version commit together.
  const writeRecordNow = db.transaction(
    (table: RecordTable, id: string, statement: Database.Statement, params: ReadonlyArray<unknown>): number => {
      const changes = statement.run(...params).changes
      if (changes > 0) {
        recordVersion(table, id)
        st.setRecordHead.run(records.seq, records.hash)
      }
      return changes
    }
  )
  const writeRecord = (
    table: RecordTable,
    id: string,
    statement: Database.Statement,
    params: ReadonlyArray<unknown>
  ): number => {
    const mark = records
    try {
      return writeRecordNow(table, id, statement, params)
    } catch (error) {
      records = mark
      throw error
    }
  }
  const approvalWrite = (id: string, statement: Database.Statement, params: ReadonlyArray<unknown>): OpResult => {
    const changes = writeRecord("approvals", id, statement, params)
    return { ok: true, changes, row: st.approval.get(id) as Record<string, unknown> | undefined }
  }
  const run = (op: Exclude<Op, AppendOp>): OpResult => {
    try {
      switch (op.op) {
        case "createSession": {
          const refused = sessionRefusal(op.id, op)
          if (refused) return failed(refused)
          writeRecord("sessions", op.id, st.insertSession, op.params)
          return { ok: true }
        }
        case "updateSession":
          return { ok: true, changes: writeRecord("sessions", op.id, st.updateSession, [op.params]) }
        case "resolveApproval":
          return approvalWrite(op.id, st.resolveApproval, op.params)
        case "useGrant":
          return approvalWrite(op.id, st.useGrant, op.params)
        case "revokeGrant":
          return approvalWrite(op.id, st.revokeGrant, op.params)
      }
    } catch (error) {
      return failed(error)
    }
  }

  const commit = (ops: ReadonlyArray<Op>): Array<OpResult> => {
    const results: Array<OpResult> = []
    let appends: Array<AppendOp> = []
    const flush = () => {
      for (let i = 0; i < appends.length; i += maxBatch) results.push(...commitAppends(appends.slice(i, i + maxBatch)))
      appends = []
    }
    for (const op of ops) {
      if (op.op === "append") appends.push(op)
      else {
        flush()
        results.push(run(op))
      }
    }
    flush()
    return results
  }

  return { commit, readHead }
}

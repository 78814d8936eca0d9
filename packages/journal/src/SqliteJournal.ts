/**
 * The SQLite journal: Palyra's durable, ordered, hash-chained, redacted record.
 *
 * - **Durability.** WAL mode. `synchronous = NORMAL` by default: a committed append survives a crash
 *   of the process (SIGKILL, OOM, panic) because the WAL is written before the commit returns; a
 *   power loss or kernel crash may lose the last few commits (the WAL is fsynced at checkpoints).
 *   Choose `synchronous: "FULL"` to fsync every commit and survive power loss too, at a cost per commit
 *   that group commit amortises. The writer checkpoints the WAL when it is idle, with the fsyncs off
 *   its thread (never inside a commit a caller waits on, unless the WAL reaches 10,000 frames); should
 *   the database file's fsync fail after such a checkpoint copied into it, the process is stopped at
 *   once (SIGKILL, nothing closed) so the WAL — the only copy known to be on disk — is kept, and the
 *   next open recovers every commit from it (a failed fsync is not retried: Linux reports it once).
 * - **Disk.** Besides the database file, budget ~62 MB for its `-wal` file while it is open (the
 *   10,000-frame bound of 4 KiB pages, kept at its size between restarts rather than cut back at
 *   each one, which cost a commit 4–16 ms): pages overwritten or freed since the last restarts —
 *   a deleted memory item's text, say — can linger there until their frames are reused or the file
 *   is closed, even with `secure_delete` on.
 * - **Group commit.** Appends queue up; one writer takes everything queued (up to `maxBatch`) and
 *   commits it in one short transaction, each append in its own savepoint (one append's `Conflict`
 *   never affects another). No append is acknowledged before its transaction committed.
 * - **Order.** `tape_seq` is assigned inside the transaction from the session's head: gap-free and
 *   strictly increasing under any concurrency.
 * - **Hash chain.** Every row stores `prev_hash` and `hash = SHA-256(JSON [prev_hash, session, seq,
 *   run, kind, at, payload])`, in one chain across the whole file; `chain_head` holds the last hash
 *   and the row count, so deleting the tail is detected too. `verify` recomputes it in pages.
 * - **Record chain.** Sessions, runs and approvals are rows that change (a run's state, an
 *   approval's status, a grant's uses). Every write of one appends, in the same transaction, a
 *   version to `record_versions`: the row's digest (plus short per-column hints that name what
 *   changed), hash-chained like the tape, its head in
 *   `chain_head`. This covers the writes that never touch the tape in their own transaction
 *   (resolving an approval, counting or revoking a grant) and a queued run's input, and a crash can
 *   only lose a row and its version together. `verify` walks this chain too, then checks every row
 *   against its last version and names the table, id and columns that differ (`row_edited`), and
 *   rows that vanished (`row_deleted`) or were never written by the journal (`row_inserted`).
 *   (`sessions.tokens_used`, `updated_at` and `head_seq` are counters outside the versions.)
 * - **What `verify` proves, and what it does not.** Against someone who edits the file with any
 *   SQLite client: any change to a stored row, any removal or reordering of rows inside the chains,
 *   is named. But the chains are self-contained: SHA-256 is no secret, so whoever can write the file
 *   can also remove the newest rows (or append forged ones) and rewrite `chain_head` to match, and
 *   plain `verify` passes. That is what `Anchor` is for: signed checkpoints of both chain heads
 *   (Ed25519, key in a separate 0600 file) in an append-only witness file and in the log. Then
 *   `Anchor.verify` names a truncation or rewrite of anything an anchor saw. Limits remain: rows
 *   written after the newest anchor are only as good as the file; whoever holds the key file can
 *   sign a new history; and replacing database *and* witness file together (or truncating the
 *   witness) goes unnoticed unless the witness lines (or the log) are also kept somewhere the
 *   attacker cannot write: ship them off the machine.
 * - **Redaction.** Every stored string passes through one redactor before it is written: events
 *   (tool names, arguments and results included), session keys, titles and channels, run inputs and
 *   errors, approval summaries, reasons and resolvers. Identifiers that records are found by (ids,
 *   principals, event kinds) cannot be redacted without breaking references, so one that holds a
 *   secret is refused with a `JournalError`. Session keys are found by a digest of (principal, raw
 *   key) in `key_digest`; the `key` column holds the redacted text. `secure_delete` is on, so bytes
 *   a row replaces are overwritten rather than left in free space.
 *
 * - **The writer thread.** better-sqlite3 is synchronous, so a commit (or a wait for the file's lock)
 *   stalls the thread it runs on. By default every write runs in a `worker_threads` worker that owns
 *   the write connection (`writer: "worker"`; see `internal/writerClient.ts`): events and records are
 *   redacted and encoded on the caller's thread, cross in one message per batch, and are acknowledged
 *   after the worker committed them. Reads use this thread's own connection (WAL: they see every
 *   acknowledged write). `writer: "inline"` (and `:memory:`) commits on the caller's thread instead,
 *   in batches bounded by `maxBatch` to keep each stall short (see `bench/journal`).
 *
 * @since 0.1.0
 */

import type { Worker } from "node:worker_threads"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import {
  Canonical,
  Errors,
  type Ids,
  Journal,
  type JournalAdapter,
  journalAdapter,
  Metrics,
  type Records,
  Redaction,
  RunState,
  type TapeEvent
} from "@palyra/core"
import Database from "better-sqlite3"
import { Config, Context, Effect, Either, Exit, FiberRef, FiberRefs, Layer, Option, type Scope } from "effect"
import { GENESIS, isMigrated, LATEST_MIGRATION, MIGRATIONS_TABLE, migrations } from "./internal/migrations.js"
import type { Op, OpResult, SessionCreation, WireEffects } from "./internal/protocol.js"
import { sessionKeyDigest } from "./internal/sessionKey.js"
import { makeSqlClient } from "./internal/sqlClient.js"
import type { StoredRow } from "./internal/verify.js"
import * as verifyInternal from "./internal/verify.js"
import { type CheckpointPolicy, configureConnection } from "./internal/walCheckpoint.js"
import {
  type Backend,
  DEFAULT_WRITER,
  inlineBackend,
  type WriterMode as Mode,
  toError,
  workerBackend
} from "./internal/writerClient.js"

/**
 * Where the journal commits: in a worker thread that owns the write connection, or inline.
 *
 * @since 0.1.0
 * @category Models
 */
export type WriterMode = Mode

/** @since 0.1.0 @category Models */
export interface Options {
  /** A file path, or `:memory:` (tests). */
  readonly filename: string
  /** Redaction rules, added to the defaults. `false` turns redaction off (not recommended). */
  readonly redaction?: Redaction.RedactionOptions | false | undefined
  /** Largest encoded event, in bytes (default 1 MiB). */
  readonly maxEventBytes?: number | undefined
  /** `NORMAL` (default: survives process crashes) or `FULL` (also survives power loss). */
  readonly synchronous?: "NORMAL" | "FULL" | undefined
  /** How long to wait for a lock held by another connection (default 5,000 ms). */
  readonly busyTimeoutMs?: number | undefined
  /** Most appends committed in one transaction (default 256). */
  readonly maxBatch?: number | undefined
  /**
   * Open an existing journal read-only (offline verification): no migrations are run (the file
   * must already be at this version's schema) and every write fails with `JournalError`.
   */
  readonly readonly?: boolean | undefined
  /**
   * Where writes are committed: `"worker"` (default) in a `worker_threads` worker that owns the
   * write connection, so commits never stall this thread's event loop; `"inline"` on this thread
   * (one thread less; fine for tools and tests). `:memory:` and read-only journals are always inline.
   */
  readonly writer?: WriterMode | undefined
  /** Called with the writer's worker once it is started (tests: to crash it). @internal */
  readonly onWorker?: ((worker: Worker) => void) | undefined
  /**
   * Called once if the writer thread stops unexpectedly (not when the journal closes): from then on
   * every write fails with `JournalError`, so a long-running process should stop (and let its
   * supervisor restart it) rather than keep answering. palyrad exits with an error.
   */
  readonly onWriterStopped?: ((reason: string) => void) | undefined
  /**
   * When the writer checkpoints the WAL (frames): when idle past `idleFrames`, inside a commit past
   * `maxFrames` (default 1,000 / 10,000; see `internal/walCheckpoint.ts`). @internal
   */
  readonly checkpoint?: CheckpointPolicy | undefined
}

/**
 * The heads of the journal's two chains as committed: the tape chain (`count` rows ending in
 * `hash`) and the record chain (`records` versions ending in `recordsHash`).
 *
 * @since 0.1.0
 * @category Models
 */
export interface ChainHead {
  readonly count: number
  readonly hash: string
  readonly records: number
  readonly recordsHash: string
}

/** Which chain: the tape's, or the record versions'. @since 0.1.0 @category Models */
export type ChainName = "tape" | "records"

/**
 * The SQLite journal: the `Journal` port plus what an anchor needs to checkpoint and check the
 * chains (see `Anchor`). Only this package's anchor uses the extra members; the core port stays
 * as it is.
 *
 * @since 0.1.0
 * @category Models
 */
export interface Service extends Journal.Service {
  /** The committed chain heads. */
  readonly chainHead: Effect.Effect<ChainHead, Errors.JournalError>
  /**
   * Make everything committed so far durable (a WAL checkpoint, which fsyncs) and return the heads
   * it covers; `None` when the checkpoint could not complete (a reader held it back): try later.
   * An anchor must never sign rows a power loss could still take back.
   */
  readonly durableHead: Effect.Effect<Option.Option<ChainHead>, Errors.JournalError>
  /** The hash stored at 1-based `position` of a chain (the genesis hash at 0); `None` past its end. */
  readonly hashAt: (chain: ChainName, position: number) => Effect.Effect<Option.Option<string>, Errors.JournalError>
  /** `verify`, reporting after every page read of either chain (for a progress bar). */
  readonly verifyWithProgress: (
    onProgress: (progress: VerifyProgress) => Effect.Effect<void>
  ) => Effect.Effect<Journal.VerifyResult, Errors.JournalError>
}

/** How far `verifyWithProgress` has got: rows of one chain checked so far. @since 0.1.0 @category Models */
export interface VerifyProgress {
  readonly chain: ChainName
  readonly checked: number
}

/** The SQLite journal's own tag (the same service is also provided as `Journal`). @since 0.1.0 @category Tags */
export class SqliteJournal extends Context.Tag("@palyra/journal/SqliteJournal")<SqliteJournal, Service>() {}

type AppendError = Errors.JournalError | Errors.NotFound | Errors.Conflict

interface Prepared {
  readonly tag: string
  readonly runId: string | null
  readonly at: number
  readonly payload: string
  readonly body: Record<string, unknown>
}

const ENVELOPE = new Set(["_tag", "sessionId", "runId", "tapeSeq", "at"])

/** The hash of one tape row; the same function writes and verifies. @internal */
export const rowHash = verifyInternal.rowHash

const toEvent = (row: StoredRow): TapeEvent.TapeEvent =>
  ({
    ...JSON.parse(row.payload),
    _tag: row.kind,
    sessionId: row.session_id,
    runId: row.run_id,
    tapeSeq: row.tape_seq,
    at: row.created_at
  }) as TapeEvent.TapeEvent

const toSession = (r: Record<string, unknown>): Records.Session => ({
  id: r.id as Ids.SessionId,
  principal: r.principal as string,
  key: (r.key as string | null) ?? null,
  channel: (r.channel as string | null) ?? null,
  title: (r.title as string | null) ?? null,
  parentId: (r.parent_id as Ids.SessionId | null) ?? null,
  parentSeq: (r.parent_seq as number | null) ?? null,
  resetGeneration: r.reset_generation as number,
  historyFromSeq: r.history_from_seq as number,
  tokensUsed: r.tokens_used as number,
  archived: r.archived === 1,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
  agentId: r.agent_id as string
})

const toRun = (r: Record<string, unknown>): Records.Run => ({
  id: r.id as Ids.RunId,
  sessionId: r.session_id as Ids.SessionId,
  principal: r.principal as string,
  state: r.state as Records.Run["state"],
  input: r.input as string,
  startSeq: r.start_seq as number,
  error: r.error_code === null ? null : { code: r.error_code as string, message: (r.error_message as string) ?? "" },
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
  // Absent while the run runs (and before migration 0011 on a read-only open).
  ...(typeof r.end_seq === "number" ? { endSeq: r.end_seq } : {})
})

const toApproval = (r: Record<string, unknown>): Records.ApprovalRecord => ({
  id: r.id as Ids.ApprovalId,
  sessionId: r.session_id as Ids.SessionId,
  runId: r.run_id as Ids.RunId,
  toolCallId: r.tool_call_id as Ids.ToolCallId,
  principal: r.principal as string,
  tool: r.tool as string,
  argsDigest: r.args_digest as string,
  risk: r.risk as Records.ApprovalRecord["risk"],
  summary: r.summary as string,
  status: r.status as Records.ApprovalStatus,
  scope: r.scope as Records.ApprovalRecord["scope"],
  requestedAt: r.requested_at as number,
  expiresAt: r.expires_at as number,
  resolvedAt: (r.resolved_at as number | null) ?? null,
  resolver: (r.resolver as string | null) ?? null,
  reason: (r.reason as string | null) ?? null,
  grantExpiresAt: (r.grant_expires_at as number | null) ?? null,
  grantUses: (r.grant_uses as number | null) ?? 0,
  grantMaxUses: (r.grant_max_uses as number | null) ?? null
})

const toCheckpoint = (r: Record<string, unknown>): Journal.Checkpoint => ({
  id: r.id as string,
  sessionId: r.session_id as Ids.SessionId,
  fromSeq: r.from_seq as number,
  toSeq: r.to_seq as number,
  summary: r.summary as string,
  state: JSON.parse(r.state as string) as unknown,
  createdAt: r.created_at as number
})

const journalError = (method: string) => (cause: unknown) =>
  new Errors.JournalError({ method, message: cause instanceof Error ? cause.message : String(cause), cause })

/**
 * Migrations a read-only journal may find not yet applied: they change nothing a reader needs (0010
 * only dropped an index no query needs; without 0011's `runs.end_seq` a run's reads are unbounded,
 * and `verify` checks a row by the columns it has). Listed by name, so a new migration is required
 * of readers unless it is added here on purpose.
 */
const READERS_MAY_SKIP: ReadonlySet<string> = new Set(["0010_tape_without_run_index", "0011_run_ends"])
/** The oldest schema a read-only journal can read: the newest migration readers need. */
const READABLE_FROM_MIGRATION = Math.max(
  0,
  ...Object.keys(migrations)
    .filter((id) => !READERS_MAY_SKIP.has(id))
    .map((id) => Number(id.slice(0, 4)))
)

/** A read-only journal cannot migrate: it must already be at this version's schema. */
const requireSchema = (db: Database.Database) =>
  Effect.flatMap(
    Effect.try({
      try: () =>
        (db.prepare(`SELECT max(migration_id) AS id FROM ${MIGRATIONS_TABLE}`).get() as { id: number | null }).id ?? 0,
      catch: (cause) =>
        new Errors.JournalError({ method: "open", message: "not a Palyra journal (no migrations table)", cause })
    }),
    (version) =>
      version >= READABLE_FROM_MIGRATION
        ? Effect.void
        : Effect.fail(
            new Errors.JournalError({
              method: "open",
              message: `the journal's schema is at migration ${version}, this version needs ${LATEST_MIGRATION}: open it once read-write (start palyrad) to migrate it`
            })
          )
  )

/**
 * Open (creating or migrating) a journal file. The journal is closed, after the writer has committed
 * everything queued, when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<Service, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const maxEventBytes = options.maxEventBytes ?? 1024 * 1024
    const maxBatch = options.maxBatch ?? 256
    const redactor = options.redaction === false ? Redaction.none : Redaction.make(options.redaction || {})
    const redact = redactor.redact
    const text = <A extends string | null>(value: A): A => (value === null ? null : redactor.redactString(value)) as A
    // Identifiers already found clean (event kinds, run ids repeat on every append): bounded, the
    // oldest forgotten first (a Set iterates in insertion order) — emptying it at once made every
    // identifier of the live runs pay its redaction scan again on the same append.
    const cleanIds = new Set<string>()
    const isClean = (value: string) => {
      if (cleanIds.has(value)) return true
      if (redactor.redactString(value) !== value) return false
      if (cleanIds.size >= 1024) cleanIds.delete(cleanIds.values().next().value as string)
      cleanIds.add(value)
      return true
    }
    /** A refusal when an identifier (which cannot be redacted without breaking references) holds a secret. */
    const secretIn = (method: string, fields: Record<string, string | null>): Errors.JournalError | undefined => {
      // `for…in` over the fields' own keys (literal objects): no entry arrays per check (two appends a turn).
      for (const field in fields) {
        const value = fields[field] as string | null
        if (value !== null && !isClean(value)) {
          return new Errors.JournalError({ method, message: `${field} looks like it holds a secret: not stored` })
        }
      }
      return undefined
    }
    const readonly = options.readonly === true

    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const db = new Database(options.filename, readonly ? { readonly: true, fileMustExist: true } : {})
          if (!readonly && options.filename !== ":memory:") db.pragma("journal_mode = WAL")
          db.pragma(`synchronous = ${options.synchronous ?? "NORMAL"}`)
          db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`)
          db.pragma("foreign_keys = ON")
          // Overwrite what a row update or delete replaces (e.g. rows scrubbed by a migration).
          db.pragma("secure_delete = ON")
          // No automatic checkpoint before the writer's hard bound (internal/walCheckpoint.ts).
          if (!readonly && options.filename !== ":memory:") configureConnection(db, options.checkpoint)
          return db
        },
        catch: journalError("open")
      }),
      (db) => Effect.sync(() => db.close())
    )

    if (readonly) yield* requireSchema(db)
    else if (!isMigrated(db)) {
      const sql = yield* makeSqlClient(db)
      yield* Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: MIGRATIONS_TABLE }).pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.provideService(Redaction.CurrentRedactor, redactor),
        Effect.mapError(journalError("migrate"))
      )
    }

    const st = {
      session: db.prepare("SELECT * FROM sessions WHERE id = ?"),
      sessionExists: db.prepare("SELECT 1 FROM sessions WHERE id = ?"),
      sessionByKey: db.prepare("SELECT * FROM sessions WHERE principal = ? AND key_digest = ? AND archived = 0"),
      run: db.prepare("SELECT * FROM runs WHERE id = ?"),
      approval: db.prepare("SELECT * FROM approvals WHERE id = ?"),
      checkpoint: db.prepare("SELECT * FROM checkpoints WHERE id = ?"),
      checkpointsOf: db.prepare("SELECT * FROM checkpoints WHERE session_id = ? ORDER BY created_at, id"),
      maxSeq: db.prepare("SELECT max(tape_seq) AS seq FROM tape_events WHERE session_id = ?"),
      fullHead: db.prepare(
        "SELECT count, hash, records_seq AS records, records_hash AS recordsHash FROM chain_head WHERE id = 1"
      ),
      tapeHashAt: db.prepare("SELECT hash FROM tape_events WHERE chain_seq = ?"),
      recordHashAt: db.prepare("SELECT hash FROM record_versions WHERE seq = ?")
    }

    // ---- the writer ---------------------------------------------------------------------------
    // Every write is an `Op` (redacted and encoded here, on the caller's fiber) for one writer: in a
    // worker thread that owns the write connection (`writer: "worker"`, the default for files), or
    // on this thread (`"inline"`, and always for `:memory:`, which a second connection cannot see).
    const writerMode: WriterMode =
      readonly || options.filename === ":memory:" ? "inline" : (options.writer ?? DEFAULT_WRITER)
    const runtime = yield* Effect.runtime<never>()
    // A plain metric update per group commit with the runtime's labels, read once (what
    // `Metrics.recordJournalAppend` run in this runtime records, without a fiber per commit).
    const metricLabels = FiberRefs.getOrDefault(runtime.fiberRefs, FiberRef.currentMetricLabels)
    const recordMetric = (ms: number, appends: number) => Metrics.unsafeRecord.journalAppend(ms, appends, metricLabels)
    const backend: Backend =
      writerMode === "worker"
        ? yield* workerBackend(options, maxBatch, st, recordMetric)
        : yield* inlineBackend(
            db,
            maxBatch,
            recordMetric,
            readonly || options.filename === ":memory:" ? undefined : options.filename,
            options.checkpoint
          )
    let closed = false
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        return backend.close
      })
    )

    const closedError = (method: string) => new Errors.JournalError({ method, message: "the journal is closed" })
    /** Submit one write and wait for its result (typed failures mapped to core's errors). */
    const write = (method: string, op: Op) =>
      Effect.async<OpResult & { ok: true }, Errors.JournalError | Errors.NotFound | Errors.Conflict>((resume) => {
        if (closed) return resume(Effect.fail(closedError(method)))
        backend.submit(op, (r) => resume(r.ok ? Effect.succeed(r) : Effect.fail(toError(method, r))))
      })

    // Canonical JSON sorts an object's keys unless they already are (0.5 µs for a tool result's six
    // fields), and an event's fields are in its constructor's order: the payload is encoded from a
    // copy of the body in sorted order, that order kept per event kind (checked against the body:
    // a different shape sorts again). The stored event keeps the body's own order.
    const bodyOrders = new Map<string, ReadonlyArray<string>>()
    const sortedBody = (tag: string, body: Record<string, unknown>, fields: number): Record<string, unknown> => {
      let order = bodyOrders.get(tag)
      if (order === undefined || order.length !== fields || !order.every((k) => Object.hasOwn(body, k))) {
        order = Object.keys(body).sort()
        if (bodyOrders.size >= 256) bodyOrders.clear()
        bodyOrders.set(tag, order)
      }
      const sorted: Record<string, unknown> = {}
      for (const k of order) sorted[k] = body[k]
      return sorted
    }
    const prepare = (
      event: TapeEvent.NewTapeEvent
    ): Either.Either<Prepared, Errors.PayloadTooLarge | Errors.JournalError> => {
      if (!isClean(event._tag) || (event.runId !== null && !isClean(event.runId))) {
        return Either.left(secretIn("append", { kind: event._tag, runId: event.runId })!)
      }
      const clean = redact(event) as Record<string, unknown>
      const body: Record<string, unknown> = {}
      let fields = 0
      for (const k of Object.keys(clean)) {
        if (ENVELOPE.has(k)) continue
        body[k] = clean[k]
        fields++
      }
      const payload = Canonical.canonicalJson(sortedBody(event._tag, body, fields))
      // UTF-8 takes at most 3 bytes per UTF-16 unit: count the bytes only when that bound is over.
      const size = payload.length * 3 <= maxEventBytes ? 0 : Buffer.byteLength(payload)
      if (size > maxEventBytes) {
        return Either.left(new Errors.PayloadTooLarge({ what: `${event._tag} event`, size, limit: maxEventBytes }))
      }
      return Either.right({ tag: event._tag, runId: event.runId, at: event.at, payload, body })
    }

    /** The identifiers a new session row stores. */
    const sessionIds = (s: Records.Session) => ({
      id: s.id,
      principal: s.principal,
      "parent id": s.parentId,
      agent: s.agentId
    })

    /** A new session as the writer inserts it (only the redacted key is written; the raw key lives on as its digest). */
    const sessionCreation = (s: Records.Session): SessionCreation => {
      const digest = s.key === null ? null : sessionKeyDigest(s.principal, s.key)
      return {
        principal: s.principal,
        digest,
        params: [
          s.id,
          s.principal,
          text(s.key),
          digest,
          text(s.channel),
          text(s.title),
          s.parentId,
          s.parentSeq,
          s.resetGeneration,
          s.historyFromSeq,
          s.tokensUsed,
          s.archived ? 1 : 0,
          s.createdAt,
          s.updatedAt,
          s.agentId
        ]
      }
    }

    /** The identifiers an append would store outside its events. */
    const effectIds = ({
      createRun: r,
      runTransition: t,
      createApproval: a,
      createCheckpoint: c
    }: Journal.AppendEffects) => ({
      "checkpoint id": c?.id ?? null,
      "run id": r?.id ?? t?.runId ?? null,
      "run session id": r?.sessionId ?? null,
      "run principal": r?.principal ?? null,
      "approval id": a?.id ?? null,
      "approval session id": a?.sessionId ?? null,
      "approval run id": a?.runId ?? null,
      "approval tool call id": a?.toolCallId ?? null,
      "approval principal": a?.principal ?? null,
      "approval args digest": a?.argsDigest ?? null
    })

    /** An append's effects, redacted, as the writer's statement parameters. */
    const wireEffects = (e: Journal.AppendEffects): WireEffects => {
      const { createRun: r, runTransition: t, createApproval: a, createCheckpoint: c, createSession: s } = e
      return {
        addTokens: e.addTokens,
        createSession: s && sessionCreation(s),
        createRun: r && [
          r.id,
          r.sessionId,
          r.principal,
          r.state,
          text(r.input),
          r.startSeq,
          text(r.error?.code ?? null),
          text(r.error?.message ?? null),
          r.createdAt,
          r.updatedAt
        ],
        runTransition: t && {
          runId: t.runId,
          from: t.from,
          to: t.to,
          errorCode: text(t.error?.code ?? null),
          errorMessage: text(t.error?.message ?? null),
          ends: RunState.isTerminal(t.to)
        },
        createApproval: a && [
          a.id,
          a.sessionId,
          a.runId,
          a.toolCallId,
          a.principal,
          text(a.tool),
          a.argsDigest,
          a.risk,
          text(a.summary),
          a.status,
          a.scope,
          a.requestedAt,
          a.expiresAt,
          a.resolvedAt,
          text(a.resolver),
          text(a.reason)
        ],
        createCheckpoint: c && [
          c.id,
          c.sessionId,
          c.fromSeq,
          c.toSeq,
          text(c.summary),
          Canonical.canonicalJson(redact(c.state)),
          c.createdAt
        ]
      }
    }

    // No Effect, no generator: refuse, redact and encode on the caller's stack, hand the write to the
    // writer, and call `done` from the writer's callback. `append` is this in one `Effect.async`; the
    // tape calls it directly (`Journal.appendNowOf`) to save a suspend/resume per streamed event.
    const appendNow: Journal.AppendNow = (sessionId, events, effects = {}, done) => {
      if (closed) return done(Exit.fail(closedError("append")))
      const withEffects = !!(
        effects.createRun ||
        effects.runTransition ||
        effects.createApproval ||
        effects.createCheckpoint ||
        effects.createSession
      )
      const refused = withEffects
        ? (secretIn("append", effectIds(effects)) ??
          (effects.createSession && secretIn("append", sessionIds(effects.createSession))))
        : undefined
      if (refused) return done(Exit.fail(refused))
      if (effects.createSession && effects.createSession.id !== sessionId) {
        return done(
          Exit.fail(new Errors.Conflict({ message: `session ${effects.createSession.id} is not the append's session` }))
        )
      }
      const prepared: Array<Prepared> = []
      for (const e of events) {
        const p = prepare(e)
        if (Either.isLeft(p)) return done(Exit.fail(p.left))
        prepared.push(p.right)
      }
      const op: Op = {
        op: "append",
        sessionId,
        events: prepared,
        effects: withEffects ? wireEffects(effects) : effects.addTokens ? { addTokens: effects.addTokens } : {}
      }
      backend.submit(op, (r) => {
        if (!r.ok) return done(Exit.fail(toError("append", r) as AppendError))
        // The stored events are rebuilt from what was sent plus the seqs: no event crosses back.
        const first = r.seq!
        const stored: Array<TapeEvent.TapeEvent> = []
        for (let i = 0; i < prepared.length; i++) {
          const e = prepared[i]!
          stored.push({ ...e.body, _tag: e.tag, sessionId, runId: e.runId, tapeSeq: first + i, at: e.at } as never)
        }
        done(Exit.succeed(stored))
      })
    }
    const append: Journal.Service["append"] = Journal.withAppendNow(
      (sessionId, events, effects) =>
        Effect.async<ReadonlyArray<TapeEvent.TapeEvent>, Journal.AppendError>((resume) =>
          appendNow(sessionId, events, effects, resume)
        ),
      appendNow
    )

    const sync = <A>(method: string, f: () => A) => Effect.try({ try: f, catch: journalError(method) })

    // Statements built from a query's shape (which filters it has) are prepared once per shape.
    const shapes = new Map<string, Database.Statement>()
    const statement = (sql: string) => {
      let prepared = shapes.get(sql)
      if (prepared === undefined) {
        prepared = db.prepare(sql)
        shapes.set(sql, prepared)
      }
      return prepared
    }
    const readTape: Journal.Service["readTape"] = (sessionId, o) =>
      sync("readTape", () => {
        const params: Array<unknown> = [sessionId, o.afterSeq]
        if (o.uptoSeq !== undefined) params.push(o.uptoSeq)
        if (o.runId !== undefined) params.push(o.runId)
        params.push(o.limit === undefined ? -1 : Math.max(0, o.limit))
        const where = `session_id = ? AND tape_seq > ?${o.uptoSeq === undefined ? "" : " AND tape_seq <= ?"}${o.runId === undefined ? "" : " AND run_id = ?"}`
        const rows = statement(`SELECT * FROM tape_events WHERE ${where} ORDER BY tape_seq LIMIT ?`).all(
          ...params
        ) as Array<StoredRow>
        return rows.map(toEvent)
      })

    const verify: Journal.Service["verify"] = verifyInternal.verifyJournal(db)

    const chainHead: Service["chainHead"] = sync("chainHead", () => st.fullHead.get() as ChainHead)
    const durableHead: Service["durableHead"] = sync("durableHead", () => {
      // The head is read first, then checkpointed: a completed checkpoint covers every commit in the
      // WAL when it ran, so at least this head (the writer may commit more meanwhile, on its thread).
      // With `synchronous = NORMAL` a commit is in the WAL but not yet fsynced; a completed
      // checkpoint fsyncs the WAL and the database file. (Not in WAL mode, e.g. `:memory:`, it
      // reports -1/-1.)
      const head = st.fullHead.get() as ChainHead
      if (options.synchronous !== "FULL") {
        const r = db.pragma("wal_checkpoint(PASSIVE)") as Array<{ busy: number; log: number; checkpointed: number }>
        const c = r[0]
        if (c === undefined || c.busy !== 0 || c.log !== c.checkpointed) return Option.none()
      }
      return Option.some(head)
    })
    const hashAt: Service["hashAt"] = (chain, position) =>
      sync("hashAt", () => {
        if (position === 0) return Option.some(GENESIS)
        const row = (chain === "tape" ? st.tapeHashAt : st.recordHashAt).get(position) as { hash: string } | undefined
        return Option.fromNullable(row?.hash)
      })

    /** An approval's conditional update: `NotFound` if it does not exist, `Conflict` if it did not apply. */
    const approvalWrite = (
      method: "resolveApproval" | "useGrant" | "revokeGrant",
      id: string,
      params: () => ReadonlyArray<unknown>,
      conflict: (row: Record<string, unknown>) => string
    ): Effect.Effect<Records.ApprovalRecord, Errors.NotFound | Errors.Conflict | Errors.JournalError> =>
      Effect.flatMap(
        Effect.suspend(() => write(method, { op: method, id, params: params() })),
        ({ changes, row }): Effect.Effect<Records.ApprovalRecord, Errors.NotFound | Errors.Conflict> =>
          row === undefined
            ? Effect.fail(new Errors.NotFound({ entity: "approval", id }))
            : changes === 0
              ? Effect.fail(new Errors.Conflict({ message: conflict(row) }))
              : Effect.succeed(toApproval(row))
      )

    const service: Service = {
      append,
      readTape,
      headSeq: (sessionId) => sync("headSeq", () => backend.readHead(sessionId) ?? 0),
      createSession: (s) =>
        Effect.suspend(() => {
          const refused = secretIn("createSession", sessionIds(s))
          if (refused) return Effect.fail(refused)
          return Effect.asVoid(
            write("createSession", {
              op: "createSession",
              id: s.id,
              ...sessionCreation(s)
            })
          )
        }) as Effect.Effect<void, Errors.Conflict | Errors.JournalError>,
      getSession: (id) =>
        sync("getSession", () =>
          Option.map(Option.fromNullable(st.session.get(id) as Record<string, unknown> | undefined), toSession)
        ),
      findSessionByKey: (principal, key) =>
        sync("findSessionByKey", () =>
          Option.map(
            Option.fromNullable(
              st.sessionByKey.get(principal, sessionKeyDigest(principal, key)) as Record<string, unknown> | undefined
            ),
            toSession
          )
        ),
      updateSession: (s) =>
        Effect.flatMap(
          Effect.suspend(() => {
            // Only the redacted key is written (and sent to the writer): the raw key lives on as its digest.
            const display = text(s.key)
            return write("updateSession", {
              op: "updateSession",
              id: s.id,
              params: {
                keyAsIs: display === s.key ? 1 : 0,
                digest: s.key === null ? null : sessionKeyDigest(s.principal, s.key),
                display,
                channel: text(s.channel),
                title: text(s.title),
                resetGeneration: s.resetGeneration,
                historyFromSeq: s.historyFromSeq,
                archived: s.archived ? 1 : 0,
                updatedAt: s.updatedAt,
                id: s.id
              }
            })
          }),
          (r) => (r.changes === 0 ? Effect.fail(new Errors.NotFound({ entity: "session", id: s.id })) : Effect.void)
        ) as Effect.Effect<void, Errors.NotFound | Errors.JournalError>,
      listSessions: (f) =>
        sync("listSessions", () => {
          const where: Array<string> = []
          const params: Array<unknown> = []
          if (f.principal !== undefined) {
            where.push("principal = ?")
            params.push(f.principal)
          }
          if (!f.includeArchived) where.push("archived = 0")
          params.push(f.limit === undefined ? -1 : f.limit)
          const clause = where.length ? `WHERE ${where.join(" AND ")}` : ""
          return (
            statement(`SELECT * FROM sessions ${clause} ORDER BY updated_at DESC, id DESC LIMIT ?`).all(
              ...params
            ) as Array<Record<string, unknown>>
          ).map(toSession)
        }),
      getRun: (id) =>
        sync("getRun", () =>
          Option.map(Option.fromNullable(st.run.get(id) as Record<string, unknown> | undefined), toRun)
        ),
      listRuns: (f) =>
        sync("listRuns", () => {
          const where: Array<string> = []
          const params: Array<unknown> = []
          if (f.sessionId !== undefined) {
            where.push("session_id = ?")
            params.push(f.sessionId)
          }
          if (f.principal !== undefined) {
            where.push("principal = ?")
            params.push(f.principal)
          }
          if (f.states !== undefined) {
            if (f.states.length === 0) return []
            where.push(`state IN (${f.states.map(() => "?").join(", ")})`)
            params.push(...f.states)
          }
          params.push(f.limit === undefined ? -1 : f.limit)
          const clause = where.length ? `WHERE ${where.join(" AND ")}` : ""
          return (
            statement(`SELECT * FROM runs ${clause} ORDER BY id LIMIT ?`).all(...params) as Array<
              Record<string, unknown>
            >
          ).map(toRun)
        }),
      resolveApproval: (id, r) =>
        approvalWrite(
          "resolveApproval",
          id,
          () => [
            r.status,
            r.scope,
            text(r.resolver),
            text(r.reason),
            r.resolvedAt,
            r.grantExpiresAt ?? null,
            r.grantMaxUses ?? null,
            id
          ],
          (row) => `approval ${id} is already ${row.status as string}`
        ),
      useGrant: (id, now) =>
        approvalWrite(
          "useGrant",
          id,
          () => [id, now],
          () => `grant ${id} no longer applies`
        ),
      revokeGrant: (id, by, at) =>
        approvalWrite(
          "revokeGrant",
          id,
          () => [text(`revoked by ${by}`), at, id],
          () => `approval ${id} is not a standing grant`
        ),
      getApproval: (id) =>
        sync("getApproval", () =>
          Option.map(Option.fromNullable(st.approval.get(id) as Record<string, unknown> | undefined), toApproval)
        ),
      listApprovals: (f) =>
        sync("listApprovals", () => {
          const where: Array<string> = []
          const params: Array<unknown> = []
          if (f.sessionId !== undefined) {
            where.push("session_id = ?")
            params.push(f.sessionId)
          }
          if (f.runId !== undefined) {
            where.push("run_id = ?")
            params.push(f.runId)
          }
          if (f.status !== undefined) {
            where.push("status = ?")
            params.push(f.status)
          }
          params.push(f.limit === undefined ? -1 : f.limit)
          const clause = where.length ? `WHERE ${where.join(" AND ")}` : ""
          return (
            statement(`SELECT * FROM approvals ${clause} ORDER BY id LIMIT ?`).all(...params) as Array<
              Record<string, unknown>
            >
          ).map(toApproval)
        }),
      listCheckpoints: (sessionId) =>
        sync("listCheckpoints", () =>
          (st.checkpointsOf.all(sessionId) as Array<Record<string, unknown>>).map(toCheckpoint)
        ),
      getCheckpoint: (id) =>
        sync("getCheckpoint", () =>
          Option.map(Option.fromNullable(st.checkpoint.get(id) as Record<string, unknown> | undefined), toCheckpoint)
        ),
      verify,
      verifyWithProgress: (onProgress) => verifyInternal.verifyJournal(db, onProgress),
      chainHead,
      durableHead,
      hashAt
    }
    return service
  }).pipe(Effect.withSpan("SqliteJournal.open", { attributes: { filename: options.filename } }))

const toContext = (service: Service) => Context.make(Journal.Journal, service).pipe(Context.add(SqliteJournal, service))

/**
 * The journal as both `Journal` (what core needs) and `SqliteJournal` (what `Anchor` needs).
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (options: Options): Layer.Layer<Journal.Journal | SqliteJournal, Errors.JournalError> =>
  Layer.scopedContext(Effect.map(make(options), toContext))

/**
 * The journal configured from `Config` (e.g. `PALYRA_JOURNAL_FILENAME` under the usual providers).
 *
 * @since 0.1.0
 * @category Layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options>
): Layer.Layer<Journal.Journal | SqliteJournal, Errors.JournalError | import("effect/ConfigError").ConfigError> =>
  Layer.scopedContext(Effect.map(Effect.flatMap(Config.unwrap(config), make), toContext))

/**
 * The SQLite journal as a value for the Promise API: `createPalyra({ journal: sqliteJournal({ filename }) })`.
 *
 * @since 0.1.0
 * @category Adapters
 */
export const sqliteJournal = (options: Options): JournalAdapter => journalAdapter(layer(options))

import * as SqlClient from "@effect/sql/SqlClient"
import { Redaction } from "@palyra/core"
import type Database from "better-sqlite3"
import { Effect } from "effect"
import { appendVersion, COVERED, digestOver, RECORD_TABLES, versionHash, versionOf } from "./records.js"
import { sessionKeyDigest } from "./sessionKey.js"

/** The genesis hash: `prev_hash` of the first row. @internal */
export const GENESIS = "0".repeat(64)

const init = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    key TEXT,
    channel TEXT,
    title TEXT,
    parent_id TEXT REFERENCES sessions(id),
    parent_seq INTEGER,
    reset_generation INTEGER NOT NULL DEFAULT 0,
    history_from_seq INTEGER NOT NULL DEFAULT 0,
    tokens_used INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    head_seq INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT`
  yield* sql`CREATE UNIQUE INDEX sessions_principal_key ON sessions(principal, key) WHERE key IS NOT NULL AND archived = 0`
  yield* sql`CREATE INDEX sessions_principal_updated ON sessions(principal, updated_at DESC)`
  yield* sql`CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    principal TEXT NOT NULL,
    state TEXT NOT NULL,
    input TEXT NOT NULL,
    start_seq INTEGER NOT NULL,
    error_code TEXT,
    error_message TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT`
  yield* sql`CREATE INDEX runs_session ON runs(session_id, start_seq)`
  yield* sql`CREATE INDEX runs_state ON runs(state)`
  yield* sql`CREATE TABLE tape_events (
    chain_seq INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    tape_seq INTEGER NOT NULL,
    run_id TEXT,
    kind TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    payload TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    UNIQUE (session_id, tape_seq)
  ) STRICT`
  yield* sql`CREATE INDEX tape_events_run ON tape_events(run_id, tape_seq) WHERE run_id IS NOT NULL`
  yield* sql`CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    run_id TEXT NOT NULL REFERENCES runs(id),
    tool_call_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_digest TEXT NOT NULL,
    risk TEXT NOT NULL,
    summary TEXT NOT NULL,
    status TEXT NOT NULL,
    scope TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    resolved_at INTEGER,
    resolver TEXT,
    reason TEXT
  ) STRICT`
  yield* sql`CREATE INDEX approvals_session_status ON approvals(session_id, status)`
  yield* sql`CREATE INDEX approvals_run ON approvals(run_id)`
  yield* sql`CREATE INDEX approvals_status ON approvals(status)`
  yield* sql`CREATE TABLE checkpoints (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    from_seq INTEGER NOT NULL,
    to_seq INTEGER NOT NULL,
    summary TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT`
  yield* sql`CREATE TABLE chain_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    chain_seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    count INTEGER NOT NULL
  ) STRICT`
  yield* sql`INSERT INTO chain_head (id, chain_seq, hash, count) VALUES (1, 0, ${GENESIS}, 0)`
})

const grantsAndTasks = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // Standing grants are looked up by principal and tool on every approval-requiring call.
  yield* sql`CREATE INDEX approvals_grants ON approvals(principal, tool, status, scope)`
  yield* sql`CREATE TABLE background_tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    run_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT`
  yield* sql`CREATE INDEX background_tasks_due ON background_tasks(state, run_at)`
})

const grantLimits = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // Standing grants may expire and may be limited to a number of uses.
  yield* sql`ALTER TABLE approvals ADD COLUMN grant_expires_at INTEGER`
  yield* sql`ALTER TABLE approvals ADD COLUMN grant_uses INTEGER NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE approvals ADD COLUMN grant_max_uses INTEGER`
})

const sessionKeyDigests = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // The journal provides its configured redactor; the default rules otherwise.
  const redactor = yield* Redaction.CurrentRedactor
  const text = <A extends string | null>(value: A): A => (value === null ? null : redactor.redactString(value)) as A
  // Sessions are looked up by a digest of (principal, key), so the key can be stored redacted. Two
  // keys that redact alike must not collide, so uniqueness moves from the key to its digest.
  yield* sql`ALTER TABLE sessions ADD COLUMN key_digest TEXT`
  yield* sql`DROP INDEX sessions_principal_key`
  const sessions = yield* sql<{
    id: string
    principal: string
    key: string | null
    channel: string | null
    title: string | null
  }>`SELECT id, principal, key, channel, title FROM sessions`
  for (const s of sessions) {
    const digest = s.key === null ? null : sessionKeyDigest(s.principal, s.key)
    yield* sql`UPDATE sessions SET key_digest = ${digest}, key = ${text(s.key)}, channel = ${text(s.channel)},
      title = ${text(s.title)} WHERE id = ${s.id}`
  }
  yield* sql`CREATE UNIQUE INDEX sessions_principal_key_digest ON sessions(principal, key_digest)
    WHERE key_digest IS NOT NULL AND archived = 0`
  // Rows written before redaction covered every column (or under weaker rules): scrub them now.
  // The journal turns on secure_delete, so the old bytes are overwritten, not left in free space.
  // (Tape events are hash-chained and stay as they are: rewriting them would break `verify`.)
  const runs = yield* sql<{ id: string; input: string; error_code: string | null; error_message: string | null }>`
    SELECT id, input, error_code, error_message FROM runs`
  for (const r of runs) {
    const [input, code, message] = [text(r.input), text(r.error_code), text(r.error_message)]
    if (input !== r.input || code !== r.error_code || message !== r.error_message) {
      yield* sql`UPDATE runs SET input = ${input}, error_code = ${code}, error_message = ${message} WHERE id = ${r.id}`
    }
  }
  const approvals = yield* sql<{
    id: string
    tool: string
    summary: string
    resolver: string | null
    reason: string | null
  }>`SELECT id, tool, summary, resolver, reason FROM approvals`
  for (const a of approvals) {
    const [tool, summary, resolver, reason] = [text(a.tool), text(a.summary), text(a.resolver), text(a.reason)]
    if (tool !== a.tool || summary !== a.summary || resolver !== a.resolver || reason !== a.reason) {
      yield* sql`UPDATE approvals SET tool = ${tool}, summary = ${summary}, resolver = ${resolver}, reason = ${reason}
        WHERE id = ${a.id}`
    }
  }
})

const recordVersions = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // The record chain (see records.ts): every write of a session, run or approval row appends a
  // version of it, chained, in the same transaction. Its head sits beside the tape's.
  yield* sql`CREATE TABLE record_versions (
    seq INTEGER PRIMARY KEY,
    tbl TEXT NOT NULL,
    row_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    hints TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
  ) STRICT`
  yield* sql`CREATE INDEX record_versions_row ON record_versions(tbl, row_id, seq)`
  yield* sql`ALTER TABLE chain_head ADD COLUMN records_seq INTEGER NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE chain_head ADD COLUMN records_hash TEXT NOT NULL DEFAULT ${sql.literal(`'${GENESIS}'`)}`
  // Rows written before this migration get their first version now: from here on they are covered.
  for (const table of RECORD_TABLES) {
    const rows = yield* sql<{ id: string }>`SELECT id FROM ${sql(table)} ORDER BY id`
    for (const row of rows) yield* appendVersion(table, row.id)
  }
})

const sessionAgents = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // Every session is answered by one agent, fixed when it is created; older sessions are the
  // default agent's.
  yield* sql`ALTER TABLE sessions ADD COLUMN agent_id TEXT NOT NULL DEFAULT 'default'`
  // `agent_id` is covered by the record chain from here on, so every session row changed: each gets
  // a new version, but only if its last version still matches it under the columns covered before
  // (listed here, as they were): a row edited behind the journal's back is not blessed, and
  // `verify` still names it.
  const before = [
    "id",
    "principal",
    "key",
    "key_digest",
    "channel",
    "title",
    "parent_id",
    "parent_seq",
    "reset_generation",
    "history_from_seq",
    "archived",
    "created_at"
  ]
  const rows = yield* sql<Record<string, unknown>>`SELECT * FROM sessions ORDER BY id`
  for (const row of rows) {
    const id = row.id as string
    const [last] = yield* sql<{ digest: string }>`
      SELECT digest FROM record_versions WHERE tbl = 'sessions' AND row_id = ${id} ORDER BY seq DESC LIMIT 1`
    // A file migrated from before 0005 in one go got its first versions from this code's `COVERED`,
    // where the column did not exist yet (null).
    const unchanged =
      last !== undefined &&
      (last.digest === digestOver(before, row) ||
        last.digest === digestOver(COVERED.sessions, { ...row, agent_id: null }))
    if (unchanged) yield* appendVersion("sessions", id)
  }
})

const tasksAndMemory = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // The background queue (see SqliteTaskQueue.ts): replaces 0002's `background_tasks`, which no
  // version wrote (its rows, if any, are carried over as queued tasks).
  yield* sql`CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    not_before INTEGER NOT NULL,
    expires_at INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    backoff_base_ms INTEGER NOT NULL,
    backoff_max_ms INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires_at INTEGER,
    heartbeat_at INTEGER,
    dedupe_key TEXT,
    last_error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER
  ) STRICT`
  yield* sql`INSERT INTO tasks (id, kind, payload, state, not_before, attempts, max_attempts, backoff_base_ms,
      backoff_max_ms, created_at, updated_at)
    SELECT id, kind, payload, 'queued', run_at, attempts, max(5, attempts + 1), 1000, 300000, created_at, updated_at
    FROM background_tasks WHERE state NOT IN ('done', 'succeeded', 'failed', 'cancelled')`
  yield* sql`DROP TABLE background_tasks`
  yield* sql`CREATE INDEX tasks_due ON tasks(kind, state, priority DESC, not_before, id)`
  yield* sql`CREATE INDEX tasks_lease ON tasks(state, lease_expires_at)`
  yield* sql`CREATE UNIQUE INDEX tasks_dedupe ON tasks(dedupe_key) WHERE dedupe_key IS NOT NULL`
  yield* sql`CREATE TABLE task_log (
    seq INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    event TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    owner TEXT,
    detail TEXT
  ) STRICT`
  yield* sql`CREATE INDEX task_log_task ON task_log(task_id, seq)`

  // Memory (see SqliteMemoryStore.ts): items, and a contentless FTS5 index over their words, each
  // indexed as one token prefixed with a mark of its principal (porter stemming, diacritics folded).
  // A lookup reads only the principal's postings: its cost follows the principal's items, not the
  // whole store's, and one principal's words cannot even match another's. The `principal` column
  // stays the authority every query checks.
  yield* sql`CREATE TABLE memory_items (
    n INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    agent TEXT,
    session_id TEXT,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    hash TEXT NOT NULL,
    source_run_id TEXT,
    source_seq INTEGER,
    confidence_bps INTEGER,
    pinned INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    expires_at INTEGER
  ) STRICT`
  yield* sql`CREATE INDEX memory_items_principal ON memory_items(principal, updated_at DESC)`
  yield* sql`CREATE INDEX memory_items_hash ON memory_items(principal, hash)`
  yield* sql`CREATE INDEX memory_items_expiry ON memory_items(expires_at) WHERE expires_at IS NOT NULL`
  yield* sql`CREATE VIRTUAL TABLE memory_fts USING fts5(terms, content='', contentless_delete=1,
    tokenize='porter unicode61 remove_diacritics 2')`
  // Forgotten items leave no tokens behind in the index.
  yield* sql`INSERT INTO memory_fts(memory_fts, rank) VALUES ('secure-delete', 1)`
  // Near-duplicate lookup: each item's MinHash band keys (MemoryStore.nearDuplicateKeys).
  yield* sql`CREATE TABLE memory_lsh (
    key INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (key, n)
  ) STRICT, WITHOUT ROWID`
  yield* sql`CREATE INDEX memory_lsh_n ON memory_lsh(n)`
  yield* sql`CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
    DELETE FROM memory_fts WHERE rowid = old.n;
    DELETE FROM memory_lsh WHERE n = old.n;
  END`
  yield* sql`CREATE TABLE memory_candidates (
    id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    agent TEXT,
    session_id TEXT,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    hash TEXT NOT NULL,
    confidence_bps INTEGER NOT NULL,
    source_run_id TEXT,
    source_seq INTEGER,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    decided_at INTEGER,
    decided_by TEXT,
    reason TEXT,
    item_id TEXT
  ) STRICT`
  yield* sql`CREATE INDEX memory_candidates_status ON memory_candidates(status, principal, id)`
  yield* sql`CREATE INDEX memory_candidates_hash ON memory_candidates(principal, hash) WHERE status = 'pending'`
})

// Attachments (see SqliteBlobStore.ts): content-addressed bytes the tape names by digest.
const blobs = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE blobs (
    digest TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    bytes BLOB NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID`
})

const memoryVectors = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // Vectors of memory items (see SqliteVectorIndex.ts): one per item and model, gone with the item.
  yield* sql`CREATE TABLE memory_vectors (
    item_id TEXT NOT NULL REFERENCES memory_items(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    principal TEXT NOT NULL,
    agent TEXT,
    session_id TEXT,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (item_id, model)
  ) STRICT`
  yield* sql`CREATE INDEX memory_vectors_principal ON memory_vectors(principal, model)`
})

const tapeWithoutRunIndex = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // The run index of the tape cost every event of a run a second index entry in its commit (one
  // more WAL page per active run: PERF-NOTES round 10), and no query needed it: a run's events are
  // read with their session (`readTape(session, { afterSeq, runId })`), on the tape's own
  // `(session_id, tape_seq)` index from the run's first seq.
  yield* sql`DROP INDEX IF EXISTS tape_events_run`
})

const runEnds = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // A run's last tape seq, written by the commit that makes it terminal (its end event is its last):
  // reading an old run (`readRunTape`) takes `[start_seq, end_seq]` of its session's tape, not
  // everything after its start (the run index is gone since 0010).
  yield* sql`ALTER TABLE runs ADD COLUMN end_seq INTEGER`
  // Runs that ended before this: their end is their terminal state change — their last
  // `RunStateChanged`, as a new run's terminal commit records it (events tagged with a run that
  // land after its end, a grant's change or a learning note, are not part of its tape read).
  yield* sql`UPDATE runs SET end_seq = ends.last
    FROM (SELECT run_id, max(tape_seq) AS last FROM tape_events
      WHERE run_id IS NOT NULL AND kind = 'RunStateChanged' GROUP BY run_id) AS ends
    WHERE runs.id = ends.run_id AND runs.state IN ('Done', 'Cancelled', 'Failed')`
  // `end_seq` is covered by the record chain from here on (a forged one would hide a run's events
  // from its reads), so every run row gets a new version — but only if its last version still
  // matches it under the columns covered before (listed here, as they were), as 0007 did.
  const before = [
    "id",
    "session_id",
    "principal",
    "state",
    "input",
    "start_seq",
    "error_code",
    "error_message",
    "created_at",
    "updated_at"
  ]
  // In bulk (a journal may hold many runs; one `appendVersion` per row cost five statements), a
  // page of runs at a time in id order (memory bounded by the page, not the journal): the page's
  // last versions in one query, its new versions chained here and inserted together.
  const [head] = yield* sql<{ seq: number; hash: string }>`
    SELECT records_seq AS seq, records_hash AS hash FROM chain_head WHERE id = 1`
  if (head === undefined) return yield* Effect.dieMessage("no chain head")
  let { seq, hash } = head
  let after = ""
  for (;;) {
    const rows = yield* sql<Record<string, unknown>>`SELECT * FROM runs WHERE id > ${after} ORDER BY id LIMIT 500`
    const first = rows[0]
    const lastRow = rows.at(-1)
    if (first === undefined || lastRow === undefined) break
    after = lastRow.id as string
    const lastDigest = new Map(
      (yield* sql<{ row_id: string; digest: string }>`
        SELECT v.row_id, v.digest FROM record_versions v
        JOIN (SELECT max(seq) AS seq FROM record_versions
          WHERE tbl = 'runs' AND row_id BETWEEN ${first.id as string} AND ${after} GROUP BY row_id) l
        ON v.seq = l.seq`).map((r) => [r.row_id, r.digest] as const)
    )
    const versions: Array<Record<string, unknown>> = []
    for (const row of rows) {
      const id = row.id as string
      const last = lastDigest.get(id)
      // A file migrated from before 0005 in one go got its first versions from this code's `COVERED`,
      // where the column did not exist yet (null).
      const unchanged =
        last !== undefined &&
        (last === digestOver(before, row) || last === digestOver(COVERED.runs, { ...row, end_seq: null }))
      if (!unchanged) continue
      seq++
      const version = versionOf("runs", row)
      const next = versionHash(hash, seq, "runs", id, version)
      versions.push({
        seq,
        tbl: "runs",
        row_id: id,
        digest: version.digest,
        hints: version.hints,
        prev_hash: hash,
        hash: next
      })
      hash = next
    }
    if (versions.length > 0) yield* sql`INSERT INTO record_versions ${sql.insert(versions)}`
  }
  yield* sql`UPDATE chain_head SET records_seq = ${seq}, records_hash = ${hash} WHERE id = 1`
})

/** Every migration, in order. Never edit a released one: add a new one. @internal */
export const migrations = {
  "0001_init": init,
  "0002_grants_and_tasks": grantsAndTasks,
  "0003_grant_limits": grantLimits,
  "0004_session_key_digests": sessionKeyDigests,
  "0005_record_versions": recordVersions,
  "0006_tasks_memory": tasksAndMemory,
  "0007_session_agents": sessionAgents,
  "0008_blobs": blobs,
  "0009_memory_vectors": memoryVectors,
  "0010_tape_without_run_index": tapeWithoutRunIndex,
  "0011_run_ends": runEnds
} as const

/** The table that records applied migrations (ours, so it never collides with a host app's). @internal */
export const MIGRATIONS_TABLE = "palyra_migrations"

// Migration ids are numbered, not dense (a branch may add 0007 before 0006 lands).
/** The newest migration's number. @internal */
export const LATEST_MIGRATION = Math.max(...Object.keys(migrations).map((id) => Number(id.slice(0, 4))))

/**
 * Whether a connection's file already holds every migration: then `@effect/sql`'s Migrator, which
 * runs only the migrations numbered above the newest one applied, would run none — and still cost a
 * transaction, its table's DDL and a read of every applied row, on each of the five connections
 * palyrad opens at every start (~2 ms each, measured). False when the table is missing (a new file)
 * or behind: then the Migrator runs as before.
 *
 * @internal
 */
export const isMigrated = (db: Database.Database): boolean => {
  try {
    const row = db.prepare(`SELECT max(migration_id) AS id FROM ${MIGRATIONS_TABLE}`).get() as
      | { readonly id: number | null }
      | undefined
    return (row?.id ?? 0) >= LATEST_MIGRATION
  } catch {
    return false
  }
}

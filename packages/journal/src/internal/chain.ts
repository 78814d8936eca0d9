import { hash } from "node:crypto"
import { Canonical } from "@palyra/core"

// The hash chains' pure functions: everything the writer needs to hash rows, and nothing else, so the
// writer thread's bundle (tsup.config.ts) carries only these and core's `Canonical`.

/**
 * The record chain: every write of a stored record (a session, run or approval row) appends, in the
 * same transaction, a version to `record_versions`: the row's digest and per-column hints (see
 * `Version`), hash-chained like the tape (`hash = SHA-256(JSON [prev_hash, seq, table, row_id,
 * digest, hints])`). `verify` walks the chain, then checks that every row still has the digest of
 * its last version, and names the columns whose hints differ. Writes that do not append to the tape (resolving an approval, counting or revoking a
 * grant) are covered the same way: the version commits with the row, or neither does.
 *
 * Columns kept apart on purpose: `sessions.tokens_used`, `updated_at` and `head_seq` are counters
 * touched on the append path (and derivable from the tape), so they are not versioned.
 * @internal
 */
export const COVERED = {
  sessions: [
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
    "created_at",
    "agent_id"
  ],
  runs: [
    "id",
    "session_id",
    "principal",
    "state",
    "input",
    "start_seq",
    "error_code",
    "error_message",
    "created_at",
    "updated_at",
    "end_seq"
  ],
  approvals: [
    "id",
    "session_id",
    "run_id",
    "tool_call_id",
    "principal",
    "tool",
    "args_digest",
    "risk",
    "summary",
    "status",
    "scope",
    "requested_at",
    "expires_at",
    "resolved_at",
    "resolver",
    "reason",
    "grant_expires_at",
    "grant_uses",
    "grant_max_uses"
  ]
} as const satisfies Record<string, ReadonlyArray<string>>

/** A table whose rows are versioned. @internal */
export type RecordTable = keyof typeof COVERED

/** Every versioned table, in the order `verify` checks them. @internal */
export const RECORD_TABLES: ReadonlyArray<RecordTable> = ["sessions", "runs", "approvals"]

/**
 * What a version stores of a row: `digest`, SHA-256 over the canonical JSON of its covered column
 * values (this is what detects an edit), and `hints`, the first 8 hex digits of SHA-256 per column in
 * `COVERED` order (only for naming the column that changed: a forged hint can mislead the name,
 * never hide the edit).
 * @internal
 */
export interface Version {
  readonly digest: string
  readonly hints: string
}

const HINT = 8

/**
 * SHA-256 (hex) of a string, as `Canonical.sha256`, through node's one-shot `crypto.hash` (no `Hash`
 * object per call: a run's version hashes 11 strings).
 */
const sha256 = (text: string): string => hash("sha256", text, "hex")

/**
 * The covered columns a row has: all of them, except on a file opened read-only at an older schema
 * (a column a later migration added is then absent, and was not covered when the row's versions were
 * written: `runs.end_seq` before 0011).
 */
const coveredIn = (table: RecordTable, row: Record<string, unknown>): ReadonlyArray<string> => {
  const columns = COVERED[table]
  for (const column of columns) if (!(column in row)) return columns.filter((c) => c in row)
  return columns
}

/** The version of a row as it stands. @internal */
export const versionOf = (table: RecordTable, row: Record<string, unknown>): Version => {
  const values = coveredIn(table, row).map((column) => row[column] ?? null)
  let hints = ""
  for (const value of values) hints += sha256(Canonical.canonicalJson(value)).slice(0, HINT)
  return { digest: sha256(Canonical.canonicalJson(values)), hints }
}

/**
 * The digest of a row over the given columns, as `versionOf` computes it over `COVERED`: a migration
 * that adds a covered column checks each row against its last version under the columns covered
 * before it.
 * @internal
 */
export const digestOver = (columns: ReadonlyArray<string>, row: Record<string, unknown>): string =>
  sha256(Canonical.canonicalJson(columns.map((column) => row[column] ?? null)))

/** The chain hash of one version; the same function writes and verifies. @internal */
export const versionHash = (prevHash: string, seq: number, table: string, rowId: string, version: Version) =>
  sha256(JSON.stringify([prevHash, seq, table, rowId, version.digest, version.hints]))

/**
 * The covered columns of `row` whose hint differs from a stored version's hints. A version written
 * before a migration added a covered column has no hint for it (`runs.end_seq` for a run edited before
 * 0011, which the migration did not re-version): that column is named only when no older one differs.
 * @internal
 */
export const changedColumns = (
  table: RecordTable,
  row: Record<string, unknown>,
  storedHints: string
): Array<string> => {
  const hints = versionOf(table, row).hints
  const differs: Array<string> = []
  const hinted: Array<string> = []
  coveredIn(table, row).forEach((column, i) => {
    if (hints.slice(i * HINT, (i + 1) * HINT) === storedHints.slice(i * HINT, (i + 1) * HINT)) return
    differs.push(column)
    if ((i + 1) * HINT <= storedHints.length) hinted.push(column)
  })
  return hinted.length > 0 ? hinted : differs
}

/**
 * The hash of one tape row; the same function writes and verifies. SHA-256 (hex) as
 * `Canonical.sha256`, through node's one-shot `crypto.hash` (no `Hash` object per row: ~0.4 µs
 * less a row on the writer's thread).
 * @internal
 */
export const rowHash = (
  prevHash: string,
  sessionId: string,
  tapeSeq: number,
  runId: string | null,
  kind: string,
  at: number,
  payload: string
) => hash("sha256", JSON.stringify([prevHash, sessionId, tapeSeq, runId, kind, at, payload]), "hex")

import * as SqlClient from "@effect/sql/SqlClient"
import { Canonical } from "@palyra/core"
import { Effect } from "effect"

/**
 * The record chain: every write of a stored record (a session, run or approval row) appends, in the
 * same transaction, a version to `record_versions`: the row's per-column digests, hash-chained like
 * the tape (`hash = SHA-256(JSON [prev_hash, seq, table, row_id, columns])`). `verify` walks the
 * chain, then checks that every row equals its last version, column by column, so an edit names
 * the column. Writes that do not append to the tape (resolving an approval, counting or revoking a
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
    "channel",
    "title",
    "parent_id",
    "parent_seq",
    "reset_generation",
    "history_from_seq",
    "archived",
    "created_at"
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
    "updated_at"
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

// 128 bits of SHA-256 per column: enough that no edit can keep a column's digest (a second preimage),
// and half the bytes. The version's chain hash covers the whole map at full strength.
const columnDigest = (value: unknown) => Canonical.sha256(Canonical.canonicalJson(value ?? null)).slice(0, 32)

/** The canonical JSON of a row's column digests: what a version stores. @internal */
export const columnsOf = (table: RecordTable, row: Record<string, unknown>): string => {
  const digests: Record<string, string> = {}
  for (const column of COVERED[table]) digests[column] = columnDigest(row[column])
  return Canonical.canonicalJson(digests)
}

/** The chain hash of one version; the same function writes and verifies. @internal */
export const versionHash = (prevHash: string, seq: number, table: string, rowId: string, columns: string) =>
  Canonical.sha256(JSON.stringify([prevHash, seq, table, rowId, columns]))

/** The covered columns of `row` that differ from a stored version (all of them if it is unreadable). @internal */
export const changedColumns = (table: RecordTable, row: Record<string, unknown>, stored: string): Array<string> => {
  let recorded: Record<string, unknown>
  try {
    recorded = JSON.parse(stored) as Record<string, unknown>
  } catch {
    return [...COVERED[table]]
  }
  return COVERED[table].filter((column) => recorded[column] !== columnDigest(row[column]))
}

/**
 * Append the current version of one row, through `SqlClient` (for migrations). A migration that
 * rewrites covered rows (e.g. to scrub them) must call this for every row it rewrote, and only for
 * those: versioning rows wholesale would also bless any edit made to the file before the upgrade.
 * @internal
 */
export const appendVersion = (table: RecordTable, id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<Record<string, unknown>>`SELECT * FROM ${sql(table)} WHERE id = ${id}`
    const [head] = yield* sql<{ seq: number; hash: string }>`
      SELECT records_seq AS seq, records_hash AS hash FROM chain_head WHERE id = 1`
    if (row === undefined || head === undefined) return yield* Effect.dieMessage(`no ${table} row ${id} to version`)
    const seq = head.seq + 1
    const columns = columnsOf(table, row)
    const hash = versionHash(head.hash, seq, table, id, columns)
    yield* sql`INSERT INTO record_versions (seq, tbl, row_id, columns, prev_hash, hash)
      VALUES (${seq}, ${table}, ${id}, ${columns}, ${head.hash}, ${hash})`
    yield* sql`UPDATE chain_head SET records_seq = ${seq}, records_hash = ${hash} WHERE id = 1`
  })

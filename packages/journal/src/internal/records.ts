import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { type RecordTable, versionHash, versionOf } from "./chain.js"

export * from "./chain.js"

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
    const version = versionOf(table, row)
    const hash = versionHash(head.hash, seq, table, id, version)
    yield* sql`INSERT INTO record_versions (seq, tbl, row_id, digest, hints, prev_hash, hash)
      VALUES (${seq}, ${table}, ${id}, ${version.digest}, ${version.hints}, ${head.hash}, ${hash})`
    yield* sql`UPDATE chain_head SET records_seq = ${seq}, records_hash = ${hash} WHERE id = 1`
  })

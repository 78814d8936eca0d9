import { Errors, type Journal } from "@palyra/core"
import type Database from "better-sqlite3"
import { Effect } from "effect"
import { rowHash } from "./chain.js"
import { GENESIS } from "./migrations.js"
import { changedColumns, RECORD_TABLES, type RecordTable, versionHash, versionOf } from "./records.js"

/** One stored tape row. @internal */
export type StoredRow = {
  chain_seq: number
  session_id: string
  tape_seq: number
  run_id: string | null
  kind: string
  created_at: number
  payload: string
  prev_hash: string
  hash: string
}

type VersionRow = {
  seq: number
  tbl: string
  row_id: string
  digest: string
  hints: string
  prev_hash: string
  hash: string
}
type Head = { chain_seq: number; hash: string; count: number; records_seq: number; records_hash: string }
type Failure = Extract<Journal.VerifyResult, { ok: false }>

export { rowHash } from "./chain.js"

const PAGE = 2000

/** How far a verification has got: rows of one chain checked so far. @internal */
export interface VerifyProgress {
  readonly chain: "tape" | "records"
  readonly checked: number
}

/**
 * Verify a journal file: the tape chain and its head, the record chain and its head, then every
 * stored record against its last version. Reads in pages and yields between them; `onProgress`
 * hears after every page of either chain.
 * @internal
 */
export const verifyJournal = (
  db: Database.Database,
  onProgress: (progress: VerifyProgress) => Effect.Effect<void> = () => Effect.void
): Effect.Effect<Journal.VerifyResult, Errors.JournalError> =>
  Effect.gen(function* () {
    const sync = <A>(f: () => A) =>
      Effect.try({
        try: f,
        catch: (cause) =>
          new Errors.JournalError({
            method: "verify",
            message: cause instanceof Error ? cause.message : String(cause),
            cause
          })
      })
    const st = yield* sync(() => ({
      page: db.prepare("SELECT * FROM tape_events WHERE chain_seq > ? ORDER BY chain_seq LIMIT ?"),
      findSeq: db.prepare("SELECT chain_seq FROM tape_events WHERE session_id = ? AND tape_seq = ?"),
      head: db.prepare("SELECT chain_seq, hash, count, records_seq, records_hash FROM chain_head WHERE id = 1"),
      versions: db.prepare("SELECT * FROM record_versions WHERE seq > ? ORDER BY seq LIMIT ?"),
      lastVersion: db.prepare(
        "SELECT seq, digest, hints FROM record_versions WHERE tbl = ? AND row_id = ? ORDER BY seq DESC LIMIT 1"
      )
    }))

    // ---- 1. the tape chain ------------------------------------------------------------------
    let prev = GENESIS
    let after = 0
    let checked = 0
    const lastSeq = new Map<string, number>()
    const broken = (row: StoredRow, reason: Journal.VerifyReason, detail: string): Failure => ({
      ok: false,
      checked,
      sessionId: row.session_id,
      tapeSeq: row.tape_seq,
      reason,
      detail: `row ${row.chain_seq} (session ${row.session_id}, tape_seq ${row.tape_seq}): ${detail}`
    })
    const tapeFailure = yield* Effect.gen(function* () {
      while (true) {
        const rows = yield* sync(() => st.page.all(after, PAGE) as Array<StoredRow>)
        for (const row of rows) {
          const expected = rowHash(
            row.prev_hash,
            row.session_id,
            row.tape_seq,
            row.run_id,
            row.kind,
            row.created_at,
            row.payload
          )
          if (expected !== row.hash) return broken(row, "edited", "its contents do not match its hash")
          const seen = lastSeq.get(row.session_id) ?? 0
          if (row.prev_hash !== prev || row.tape_seq !== seen + 1) {
            if (row.tape_seq <= seen) {
              return broken(row, "reordered", `tape_seq ${row.tape_seq} comes after ${seen}`)
            }
            if (row.tape_seq > seen + 1) {
              // The missing seq may sit later in the chain (rows moved) or nowhere (rows removed).
              const later = yield* sync(
                () => st.findSeq.get(row.session_id, seen + 1) as { chain_seq: number } | undefined
              )
              return later
                ? broken(
                    row,
                    "reordered",
                    `tape_seq ${seen + 1} of this session stands later, at row ${later.chain_seq}`
                  )
                : broken(row, "deleted", `tape_seq ${seen + 1}..${row.tape_seq - 1} of this session are missing`)
            }
            if (row.chain_seq !== after + 1) {
              return broken(row, "deleted", `chain rows ${after + 1}..${row.chain_seq - 1} are missing`)
            }
            return broken(row, "inserted", "the previous row is not the one this row was chained to")
          }
          lastSeq.set(row.session_id, row.tape_seq)
          prev = row.hash
          after = row.chain_seq
          checked++
        }
        yield* onProgress({ chain: "tape", checked })
        if (rows.length < PAGE) return undefined
        yield* Effect.yieldNow()
      }
    })
    if (tapeFailure) return tapeFailure
    const head = yield* sync(() => st.head.get() as Head)
    const noRow = (reason: Journal.VerifyReason, detail: string, row?: Failure["row"]): Failure => ({
      ok: false,
      checked,
      sessionId: "",
      tapeSeq: 0,
      reason,
      detail,
      ...(row ? { row } : {})
    })
    if (head.hash !== prev || head.count !== checked) {
      return head.count > checked
        ? noRow(
            "truncated",
            `the chain head records ${head.count} rows ending at row ${head.chain_seq}; only ${checked} are present (last present: row ${after})`
          )
        : noRow("inserted", `${checked - head.count} rows were added after the recorded chain head`)
    }

    // ---- 2. the record chain ----------------------------------------------------------------
    let recPrev = GENESIS
    let recAfter = 0
    const recordFailure = yield* Effect.gen(function* () {
      while (true) {
        const rows = yield* sync(() => st.versions.all(recAfter, PAGE) as Array<VersionRow>)
        for (const v of rows) {
          const at = `record version ${v.seq} (${v.tbl} ${v.row_id})`
          if (versionHash(v.prev_hash, v.seq, v.tbl, v.row_id, v) !== v.hash) {
            return noRow("edited", `${at}: its contents do not match its hash`)
          }
          if (v.seq !== recAfter + 1) {
            return noRow("deleted", `record versions ${recAfter + 1}..${v.seq - 1} are missing (next present: ${at})`)
          }
          if (v.prev_hash !== recPrev) {
            return noRow("inserted", `${at}: the previous version is not the one it was chained to`)
          }
          recPrev = v.hash
          recAfter = v.seq
        }
        yield* onProgress({ chain: "records", checked: recAfter })
        if (rows.length < PAGE) return undefined
        yield* Effect.yieldNow()
      }
    })
    if (recordFailure) return recordFailure
    if (head.records_hash !== recPrev || head.records_seq !== recAfter) {
      return head.records_seq > recAfter
        ? noRow("truncated", `the chain head records ${head.records_seq} record versions; only ${recAfter} are present`)
        : noRow("inserted", `${recAfter - head.records_seq} record versions were added after the recorded chain head`)
    }

    // ---- 3. every stored record against its last version ------------------------------------
    for (const table of RECORD_TABLES) {
      const failure = yield* verifyTable(db, table, sync, st.lastVersion, noRow)
      if (failure) return failure
    }
    return { ok: true as const, checked }
  })

const verifyTable = (
  db: Database.Database,
  table: RecordTable,
  sync: <A>(f: () => A) => Effect.Effect<A, Errors.JournalError>,
  lastVersion: Database.Statement,
  noRow: (reason: Journal.VerifyReason, detail: string, row?: Failure["row"]) => Failure
) =>
  Effect.gen(function* () {
    const page = db.prepare(`SELECT * FROM ${table} WHERE id > ? ORDER BY id LIMIT ?`)
    const orphan = db.prepare(
      `SELECT row_id, max(seq) AS seq FROM record_versions v WHERE tbl = ?
         AND NOT EXISTS (SELECT 1 FROM ${table} t WHERE t.id = v.row_id) GROUP BY row_id ORDER BY row_id LIMIT 1`
    )
    let after = ""
    while (true) {
      const rows = yield* sync(() => page.all(after, PAGE) as Array<Record<string, unknown>>)
      for (const row of rows) {
        const id = String(row.id)
        const last = yield* sync(
          () => lastVersion.get(table, id) as { seq: number; digest: string; hints: string } | undefined
        )
        if (last === undefined) {
          return noRow("row_inserted", `${table} ${id}: this row was never written by the journal`, {
            table,
            id,
            columns: []
          })
        }
        if (last.digest !== versionOf(table, row).digest) {
          const columns = changedColumns(table, row, last.hints)
          const what =
            columns.length === 0
              ? "the row differs"
              : `${columns.join(", ")} ${columns.length === 1 ? "differs" : "differ"}`
          return noRow(
            "row_edited",
            `${table} ${id}: ${what} from its last recorded version (record version ${last.seq})`,
            {
              table,
              id,
              columns
            }
          )
        }
        after = id
      }
      if (rows.length < PAGE) break
      yield* Effect.yieldNow()
    }
    const gone = yield* sync(() => orphan.get(table) as { row_id: string; seq: number } | undefined)
    if (gone) {
      return noRow(
        "row_deleted",
        `${table} ${gone.row_id}: the row is missing (last recorded at record version ${gone.seq})`,
        { table, id: gone.row_id, columns: [] }
      )
    }
    return undefined
  })

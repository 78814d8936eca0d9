import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"
import { migrations } from "../src/internal/migrations.js"
import type { AppendOp } from "../src/internal/protocol.js"
import { makeSqlClient } from "../src/internal/sqlClient.js"
import { makeWriter } from "../src/internal/writer.js"

// Migration 0010 dropped the tape's run index (`tape_events_run`): every event of a run paid a second
// index entry in its commit, and no query needs it. These tests hold the two sides of that: a file
// written with the index migrates and keeps working, and every query the journal runs on the tape
// is still answered from an index (the planner's own answer, `EXPLAIN QUERY PLAN`).
const dir = mkdtempSync(join(tmpdir(), "palyra-tape-indexes-"))
const sid = (i: number) => `01KA${String(i).padStart(22, "0")}`
const rid = (i: number) => `01KR${String(i).padStart(22, "0")}`
const at = 1_700_000_000_000
const sessionParams = (id: string) => [id, "p", null, null, null, null, null, null, 0, 0, 0, 0, at, at, "default"]
const append = (session: string, run: string, i: number, start = false): AppendOp => ({
  op: "append",
  sessionId: session,
  events: [{ tag: "UserMessage", runId: run, at: at + i, payload: `{"text":"m${i}"}` }],
  effects: start ? { createRun: [run, session, "p", "pending", "{}", 0, null, null, at + i, at + i] } : {}
})
const indexes = (filename: string) => {
  const db = new Database(filename, { readonly: true })
  const names = db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tape_events'").all()
  db.close()
  return (names as Array<{ name: string }>).map((r) => r.name).sort()
}
const texts = (events: ReadonlyArray<unknown>) => events.map((e) => (e as { text: string }).text)

describe("the tape's indexes", () => {
  it.live(
    "0010: a journal written with the run index migrates, reads its runs back, verifies and keeps appending",
    () =>
      Effect.gen(function* () {
        const filename = join(dir, "before-0010.db")
        // The file as the previous version left it: migrations 0001–0009, written by its writer.
        const db = new Database(filename)
        db.pragma("journal_mode = WAL")
        db.pragma("foreign_keys = ON")
        yield* Effect.gen(function* () {
          const sql = yield* makeSqlClient(db)
          const before = Object.fromEntries(Object.entries(migrations).filter(([id]) => id < "0010"))
          yield* Migrator.make({})({ loader: Migrator.fromRecord(before), table: "palyra_migrations" }).pipe(
            Effect.provideService(SqlClient.SqlClient, sql)
          )
        })
        const writer = makeWriter(db, 64)
        const s = sid(1)
        const results = writer.commit([
          { op: "createSession", id: s, principal: "p", digest: null, params: sessionParams(s) },
          append(s, rid(1), 1, true),
          append(s, rid(1), 2),
          append(s, rid(2), 3, true),
          append(s, rid(1), 4),
          append(s, rid(2), 5)
        ])
        assert.isTrue(results.every((r) => r.ok))
        db.close()
        assert.include(indexes(filename), "tape_events_run")
        // Read-only (offline verification), the file opens and verifies as it is, unmigrated.
        const offline = yield* Effect.scoped(
          Effect.flatMap(SqliteJournal.make({ filename, readonly: true }), (j) => j.verify)
        )
        assert.deepStrictEqual(offline, { ok: true, checked: 5 } as never)
        assert.include(indexes(filename), "tape_events_run")

        const opened = yield* Effect.scoped(
          Effect.gen(function* () {
            const j = yield* SqliteJournal.make({ filename })
            const first = yield* j.readTape(s as never, { afterSeq: 0, runId: rid(1) as never })
            const second = yield* j.readTape(s as never, { afterSeq: 2, runId: rid(2) as never })
            const appended = yield* j.append(s as never, [
              { _tag: "UserMessage", sessionId: s as never, runId: rid(2) as never, at: at + 6, text: "m6" } as never
            ])
            const after = yield* j.readTape(s as never, { afterSeq: 2, runId: rid(2) as never })
            return { first, second, seq: appended.map((e) => e.tapeSeq), after, verify: yield* j.verify }
          })
        )
        assert.notInclude(indexes(filename), "tape_events_run")
        assert.deepStrictEqual(texts(opened.first), ["m1", "m2", "m4"])
        assert.deepStrictEqual(texts(opened.second), ["m3", "m5"])
        assert.deepStrictEqual(opened.seq, [6])
        assert.deepStrictEqual(texts(opened.after), ["m3", "m5", "m6"])
        assert.deepStrictEqual(opened.verify, { ok: true, checked: 6 } as never)
        // Opened again (nothing left to migrate), it still verifies.
        const again = yield* Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
        assert.isTrue(again.ok)
      })
  )

  it.live("every query the journal runs on the tape is answered from an index", () =>
    Effect.gen(function* () {
      const filename = join(dir, "plans.db")
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename, writer: "inline" })
          yield* j.createSession(Records.makeSession({ id: sid(2) as never, principal: "p" }))
        })
      )
      const db = new Database(filename, { readonly: true })
      const plan = (sql: string) =>
        (
          db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...Array.from(sql.matchAll(/\?/g), () => 0)) as Array<{
            detail: string
          }>
        )
          .map((r) => r.detail)
          .join("; ")
      // The statements of SqliteJournal.ts (readTape's four shapes, maxSeq, tapeHashAt), writer.ts
      // (maxSeq) and verify.ts (page, findSeq), as they are written there.
      const readTape = (where: string) => `SELECT * FROM tape_events WHERE ${where} ORDER BY tape_seq LIMIT ?`
      const queries = {
        readTape: readTape("session_id = ? AND tape_seq > ?"),
        readTapeUpTo: readTape("session_id = ? AND tape_seq > ? AND tape_seq <= ?"),
        readTapeOfRun: readTape("session_id = ? AND tape_seq > ? AND run_id = ?"),
        readTapeOfRunUpTo: readTape("session_id = ? AND tape_seq > ? AND tape_seq <= ? AND run_id = ?"),
        maxSeq: "SELECT max(tape_seq) AS seq FROM tape_events WHERE session_id = ?",
        tapeHashAt: "SELECT hash FROM tape_events WHERE chain_seq = ?",
        verifyPage: "SELECT * FROM tape_events WHERE chain_seq > ? ORDER BY chain_seq LIMIT ?",
        verifyFindSeq: "SELECT chain_seq FROM tape_events WHERE session_id = ? AND tape_seq = ?"
      }
      const plans = Object.fromEntries(Object.entries(queries).map(([name, sql]) => [name, plan(sql)]))
      db.close()
      for (const [name, detail] of Object.entries(plans)) {
        // SEARCH with an index or the rowid (chain_seq), never a SCAN of the table, never a sort.
        assert.match(detail, /^SEARCH tape_events USING (COVERING )?(INDEX|INTEGER PRIMARY KEY)/, name)
        assert.notMatch(detail, /SCAN|TEMP B-TREE/, name)
      }
      // A run's events come from the session's own index, from the run's first seq.
      assert.include(plans.readTapeOfRun, "(session_id=? AND tape_seq>?)")
    })
  )
})

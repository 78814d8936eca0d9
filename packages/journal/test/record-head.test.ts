import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"
import type { AppendOp, WireEvent } from "../src/internal/protocol.js"
import { makeWriter } from "../src/internal/writer.js"

// The writer keeps the record chain's head in memory (written once per transaction): a savepoint or
// transaction that rolls a version back must roll the in-memory head back too, or the next version
// would chain onto a hash that is not in the file and `verify` would fail.
const dir = mkdtempSync(join(tmpdir(), "palyra-record-head-"))
const sid = (i: number) => `01KA${String(i).padStart(22, "0")}`
const rid = (i: number) => `01KR${String(i).padStart(22, "0")}`
const at = 1_700_000_000_000
const event = (i: number): WireEvent => ({ tag: "UserMessage", runId: null, at: at + i, payload: `{"text":"m${i}"}` })
const startRun = (session: string, run: string, i: number): AppendOp => ({
  op: "append",
  sessionId: session,
  events: [event(i)],
  effects: { createRun: [run, session, "p", "pending", "{}", 0, null, null, at + i, at + i] }
})
const sessionParams = (id: string) => [id, "p", null, null, null, null, null, null, 0, 0, 0, 0, at, at, "a"]

const verifyFile = (filename: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const j = yield* SqliteJournal.make({ filename, writer: "inline" })
      return yield* j.verify
    })
  )

describe("the record chain's head in the writer's memory", () => {
  it.effect("a refused append whose savepoint held a version leaves the chain as if it never ran", () =>
    Effect.gen(function* () {
      const filename = join(dir, "savepoint.db")
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename, writer: "inline" })
          yield* j.createSession(Records.makeSession({ id: sid(0) as never, principal: "p" }))
        })
      )
      const db = new Database(filename)
      const writer = makeWriter(db, 64)
      const versionsBefore = (db.prepare("SELECT count(*) AS n FROM record_versions").get() as { n: number }).n
      const results = writer.commit([
        startRun(sid(0), rid(1), 1),
        // A new session (its version is written in the savepoint), then a run that exists: refused,
        // the session and its version rolled back.
        {
          ...startRun(sid(1), rid(1), 2),
          effects: {
            createSession: { principal: "p", digest: null, params: sessionParams(sid(1)) },
            createRun: [rid(1), sid(1), "p", "pending", "{}", 0, null, null, at, at]
          }
        },
        startRun(sid(0), rid(2), 3)
      ])
      // A transaction of its own after the batch: the head it starts from is the batch's.
      const later = writer.commit([startRun(sid(0), rid(3), 4)])
      db.close()
      expect(results.map((r) => r.ok)).toEqual([true, false, true])
      expect(results[1]).toMatchObject({ ok: false, tag: "Conflict" })
      expect(later.map((r) => r.ok)).toEqual([true])
      const check = new Database(filename, { readonly: true })
      const versions = check.prepare("SELECT seq, tbl, row_id FROM record_versions ORDER BY seq").all() as Array<{
        seq: number
        tbl: string
        row_id: string
      }>
      const head = check.prepare("SELECT records_seq AS seq FROM chain_head").get() as { seq: number }
      check.close()
      expect(versions.length).toBe(versionsBefore + 3)
      expect(versions.slice(versionsBefore).map((v) => v.row_id)).toEqual([rid(1), rid(2), rid(3)])
      expect(versions.map((v) => v.seq)).toEqual(versions.map((_, i) => i + 1))
      expect(head.seq).toBe(versions.length)
      expect((yield* verifyFile(filename)).ok).toBe(true)
    })
  )

  it.effect("a batch whose transaction fails after a version restores the head: the next batch's versions verify", () =>
    Effect.gen(function* () {
      const filename = join(dir, "transaction.db")
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename, writer: "inline" })
          yield* j.createSession(Records.makeSession({ id: sid(0) as never, principal: "p" }))
        })
      )
      const db = new Database(filename)
      const writer = makeWriter(db, 64)
      expect(writer.commit([startRun(sid(0), rid(1), 1)]).map((r) => r.ok)).toEqual([true])
      // Another connection slips a row in at the session's next seq: the batch's run start (its
      // version released from its savepoint) commits nothing, as the plain append after it fails on
      // the unique (session, seq) and takes the transaction down.
      const other = new Database(filename)
      other
        .prepare(
          `INSERT INTO tape_events (chain_seq, session_id, tape_seq, run_id, kind, created_at, payload, prev_hash, hash)
             VALUES (1000, ?, 3, NULL, 'UserMessage', ?, '{}', 'x', 'y')`
        )
        .run(sid(0), at)
      const plain: AppendOp = { op: "append", sessionId: sid(0), events: [event(9)], effects: {} }
      const refused = writer.commit([startRun(sid(0), rid(2), 2), plain])
      other.prepare("DELETE FROM tape_events WHERE chain_seq = 1000").run()
      other.close()
      expect(refused).toMatchObject([
        { ok: false, tag: "JournalError" },
        { ok: false, tag: "JournalError" }
      ])
      expect(writer.commit([startRun(sid(0), rid(3), 3)]).map((r) => r.ok)).toEqual([true])
      db.close()
      expect((yield* verifyFile(filename)).ok).toBe(true)
    })
  )
})

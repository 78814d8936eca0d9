/**
 * An I/O error inside an append's savepoint (here: the database is full) rolls the whole transaction
 * back, not just the savepoint. The batch must then fail as one — nothing of it on disk, the
 * in-memory chain heads unchanged — so the next batch commits and both hash chains still verify.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"
import type { AppendOp, WireEvent } from "../src/internal/protocol.js"
import { makeWriter } from "../src/internal/writer.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-disk-full-"))
const session = `01KA${"0".repeat(22)}`
const rid = (i: number) => `01KR${String(i).padStart(22, "0")}`
const at = 1_700_000_000_000
const event = (i: number, pad = 0): WireEvent => ({
  tag: "UserMessage",
  runId: null,
  at: at + i,
  payload: JSON.stringify({ text: `m${i}${"x".repeat(pad)}` })
})
// An append with a compare-and-set effect (a run created): it runs in a savepoint of its own.
const startRun = (i: number, pad = 0): AppendOp => ({
  op: "append",
  sessionId: session,
  events: [event(i, pad)],
  effects: { createRun: [rid(i), session, "p", "pending", "{}", 0, null, null, at + i, at + i] }
})
const plain = (i: number): AppendOp => ({ op: "append", sessionId: session, events: [event(i)], effects: {} })

describe("the writer when the disk is full", () => {
  it.effect("a batch whose savepoint hits SQLITE_FULL fails whole; the next one commits; the chains verify", () =>
    Effect.gen(function* () {
      const filename = join(dir, "full.db")
      yield* Effect.scoped(
        Effect.flatMap(SqliteJournal.make({ filename, writer: "inline" }), (j) =>
          j.createSession(Records.makeSession({ id: session as never, principal: "p" }))
        )
      )
      const db = new Database(filename)
      db.pragma("journal_mode = WAL")
      const writer = makeWriter(db, 64)
      assert.isTrue(writer.commit([startRun(1)])[0]!.ok)
      const count = () => (db.prepare("SELECT count(*) AS n FROM tape_events").get() as { n: number }).n
      const before = count()

      db.pragma(`max_page_count = ${(db.pragma("page_count", { simple: true }) as number) + 2}`)
      const full = writer.commit([startRun(2), startRun(3, 200_000), plain(4)])
      assert.deepStrictEqual(
        full.map((r) => r.ok),
        [false, false, false]
      )
      assert.strictEqual(count(), before)
      assert.isFalse(db.inTransaction)

      db.pragma("max_page_count = 1000000")
      const later = writer.commit([startRun(5), plain(6)])
      assert.deepStrictEqual(
        later.map((r) => r.ok),
        [true, true]
      )
      db.close()
      const verified = yield* Effect.scoped(
        Effect.flatMap(SqliteJournal.make({ filename, writer: "inline" }), (j) => j.verify)
      )
      assert.deepStrictEqual(verified, { ok: true, checked: verified.checked })
    })
  )
})

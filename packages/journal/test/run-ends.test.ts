/**
 * A run's range on its session's tape: the commit that makes a run terminal records its last seq
 * (`runs.end_seq`, migration 0011), and `readRunTape` reads `[startSeq, endSeq]` — an old run of a
 * long session no longer reads everything after its start (the run index is gone since 0010). Files
 * written before 0011 migrate (their ended runs get their end from the tape), verify, and read their
 * runs as before; opened read-only, unmigrated, they still verify and read (unbounded).
 */
import { copyFileSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, Journal, type Records, RunState, ScriptedModel, type TapeEvent } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import Database from "better-sqlite3"
import { Effect, Layer, Option } from "effect"
import { SqliteJournal } from "../src/index.js"
import { migrations } from "../src/internal/migrations.js"
import type { AppendOp } from "../src/internal/protocol.js"
import { appendVersion } from "../src/internal/records.js"
import { makeSqlClient } from "../src/internal/sqlClient.js"
import { makeWriter } from "../src/internal/writer.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-run-ends-"))
const alice = Caller.user("alice")

/** The journal with every `readTape` recorded: its options and the tape rows its range spans. */
const recordingReads = (inner: Journal.Service) => {
  const reads: Array<{ readonly options: Journal.ReadTapeOptions; readonly span: number }> = []
  const journal: Journal.Service = {
    ...inner,
    readTape: (sessionId, options) =>
      Effect.flatMap(inner.headSeq(sessionId), (head) => {
        // What the tape's `(session_id, tape_seq)` index range covers: every row in it is visited.
        reads.push({ options, span: Math.min(head, options.uptoSeq ?? head) - options.afterSeq })
        return inner.readTape(sessionId, options)
      })
  }
  return { journal, reads }
}

describe("a run's range on the tape", () => {
  it.live("an ended run records its last seq; reading an old run of a long session reads only its range", () =>
    Effect.gen(function* () {
      const filename = join(dir, "long.db")
      const model = ScriptedModel.make((_, i) => ({ text: ["ans", "wer ", `${i}`] }))
      const turns = 40
      const { runs, tape, sessionId } = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const runs: Array<Records.Run> = []
        let sessionId: TapeEvent.TapeEvent["sessionId"] | undefined
        for (let i = 0; i < turns; i++) {
          const started = yield* gateway.startRun(alice, { text: `turn ${i}`, key: "long" })
          yield* collect(started.events)
          runs.push(started.run)
          sessionId = started.session.id
        }
        const tape = yield* gateway.readTape(alice, sessionId!, { afterSeq: 0 })
        return { runs, tape, sessionId: sessionId! }
      }).pipe(Effect.provide(gatewayLayer({ model, coalesceChars: 1, journal: SqliteJournal.layer({ filename }) })))

      const read = yield* Effect.scoped(
        Effect.gen(function* () {
          const { journal, reads } = recordingReads(yield* SqliteJournal.make({ filename }))
          const stored = yield* Effect.forEach(runs, (r) => Effect.map(journal.getRun(r.id), Option.getOrThrow))
          const first = yield* Journal.readRunTape(journal, stored[0]!)
          const all = yield* Effect.forEach(stored, (r) => Journal.readRunTape(journal, r))
          return { stored, first, all, reads, verify: yield* journal.verify }
        })
      )
      for (const [i, run] of read.stored.entries()) {
        const own = tape.filter((e) => e.runId === run.id)
        assert.strictEqual(run.state, "Done")
        // The run's end is its last event, the `RunStateChanged` to `Done`.
        assert.strictEqual(run.endSeq, own.at(-1)!.tapeSeq)
        assert.strictEqual(own.at(-1)!._tag, "RunStateChanged")
        assert.deepStrictEqual(read.all[i], own)
      }
      // The first run's read spans its own events only, not the 39 runs after it.
      const firstRun = tape.filter((e) => e.runId === runs[0]!.id)
      assert.deepStrictEqual(read.first, firstRun)
      assert.strictEqual(read.reads[0]!.span, firstRun.length)
      assert.isBelow(read.reads[0]!.span * 20, tape.length)
      assert.deepStrictEqual(read.reads[0]!.options, {
        afterSeq: runs[0]!.startSeq - 1,
        uptoSeq: read.stored[0]!.endSeq,
        runId: runs[0]!.id
      })
      assert.deepStrictEqual(read.verify, { ok: true, checked: tape.length } as never)
      assert.isDefined(sessionId)
    })
  )

  it.live("a running run has no end and reads from its start; a run cancelled while queued gets one", () =>
    Effect.gen(function* () {
      const filename = join(dir, "running.db")
      const { journal, reads } = recordingReads(yield* SqliteJournal.make({ filename }))
      // The first answer takes its time (two deltas 100 ms apart): the run cannot end before.
      const model = ScriptedModel.make(() => ({ text: ["o", "k"], delayPerDelta: "100 millis" }))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const first = yield* gateway.startRun(alice, { text: "first", key: "q" })
        const second = yield* gateway.startRun(alice, { text: "second", key: "q" })
        const running = Option.getOrThrow(yield* journal.getRun(first.run.id))
        assert.isFalse(RunState.isTerminal(running.state))
        assert.isUndefined(running.endSeq)
        yield* Journal.readRunTape(journal, running)
        assert.deepStrictEqual(reads.at(-1)!.options, { afterSeq: running.startSeq - 1, runId: running.id })
        yield* gateway.cancelRun(alice, second.run.id)
        yield* collect(first.events)
        yield* collect(second.events)
        const tape = yield* journal.readTape(second.session.id, { afterSeq: 0 })
        for (const id of [first.run.id, second.run.id]) {
          const run = Option.getOrThrow(yield* journal.getRun(id))
          const own = tape.filter((e) => e.runId === id)
          assert.strictEqual(run.endSeq, own.at(-1)!.tapeSeq)
          assert.deepStrictEqual(yield* Journal.readRunTape(journal, run), own)
          assert.strictEqual(reads.at(-1)!.span, run.endSeq! - run.startSeq + 1)
        }
        assert.strictEqual(Option.getOrThrow(yield* journal.getRun(second.run.id)).state, "Cancelled")
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
    }).pipe(Effect.scoped)
  )

  it.live("0011: a journal written before it migrates (ended runs get their end from the tape), verifies, reads", () =>
    Effect.gen(function* () {
      const filename = join(dir, "before-0011.db")
      const at = 1_700_000_000_000
      const s = "01KA0000000000000000000001"
      const rid = (i: number) => `01KR${String(i).padStart(22, "0")}`
      const append = (run: string, i: number, start = false, tag = "UserMessage"): AppendOp => ({
        op: "append",
        sessionId: s,
        events: [{ tag, runId: run, at: at + i, payload: `{"text":"m${i}"}` }],
        effects: start ? { createRun: [run, s, "p", "InProgress", "{}", i, null, null, at + i, at + i] } : {}
      })
      // The file as the previous version left it: migrations up to 0010, rows written by the writer,
      // two runs ended as that version ended them (the state and its record version, no end).
      const db = new Database(filename)
      db.pragma("journal_mode = WAL")
      db.pragma("foreign_keys = ON")
      yield* Effect.gen(function* () {
        const sql = yield* makeSqlClient(db)
        const before = Object.fromEntries(Object.entries(migrations).filter(([id]) => id < "0011"))
        yield* Migrator.make({})({ loader: Migrator.fromRecord(before), table: "palyra_migrations" }).pipe(
          Effect.provideService(SqlClient.SqlClient, sql)
        )
      })
      const results = makeWriter(db, 64).commit([
        {
          op: "createSession",
          id: s,
          principal: "p",
          digest: null,
          params: [s, "p", null, null, null, null, null, null, 0, 0, 0, 0, at, at, "default"]
        },
        append(rid(1), 1, true),
        append(rid(1), 2),
        append(rid(2), 3, true),
        append(rid(1), 4, false, "RunStateChanged"),
        append(rid(2), 5),
        append(rid(3), 6, true),
        append(rid(2), 7, false, "RunStateChanged"),
        append(rid(3), 8),
        // Stamped with the first run after its end (as a grant change or a learning note is): the
        // run's end is its terminal state change, not its last stamped event.
        append(rid(1), 9)
      ])
      assert.isTrue(results.every((r) => r.ok))
      yield* Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        for (const id of [rid(1), rid(2)]) {
          yield* sql`UPDATE runs SET state = 'Done' WHERE id = ${id}`
          yield* appendVersion("runs", id)
        }
      }).pipe(Effect.provideServiceEffect(SqlClient.SqlClient, makeSqlClient(db)))
      db.close()
      // A copy with a run edited behind the journal's back before the upgrade: the migration's new
      // versions must not bless the edit.
      const edited = join(dir, "before-0011-edited.db")
      copyFileSync(filename, edited)
      const raw = new Database(edited)
      raw.prepare("UPDATE runs SET input = 'forged' WHERE id = ?").run(rid(2))
      raw.close()
      const texts = (events: ReadonlyArray<unknown>) => events.map((e) => (e as { text: string }).text)
      const runsOf = (j: Journal.Service) =>
        Effect.forEach([1, 2, 3], (i) =>
          Effect.flatMap(j.getRun(rid(i) as never), (found) => {
            const run = Option.getOrThrow(found)
            return Effect.map(Journal.readRunTape(j, run), (events) => ({ endSeq: run.endSeq, texts: texts(events) }))
          })
        )
      const expected = [
        ["m1", "m2", "m4"],
        ["m3", "m5", "m7"],
        ["m6", "m8"]
      ]

      // Read-only (offline verification), unmigrated: it verifies and reads its runs (unbounded:
      // the first run's late event too).
      const offline = yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename, readonly: true })
          return { verify: yield* j.verify, runs: yield* runsOf(j) }
        })
      )
      assert.deepStrictEqual(offline.verify, { ok: true, checked: 9 } as never)
      assert.deepStrictEqual(
        offline.runs,
        [[...expected[0]!, "m9"], expected[1]!, expected[2]!].map((t) => ({ endSeq: undefined, texts: t }))
      )

      // Opened read-write it migrates: the ended runs' ends come from the tape, the running one has none.
      const opened = yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename, writer: "inline" })
          const migrated = { verify: yield* j.verify, runs: yield* runsOf(j) }
          yield* j.append(
            s as never,
            [{ _tag: "UserMessage", sessionId: s, runId: rid(3), at: at + 10, text: "m10" } as never],
            {
              runTransition: { runId: rid(3) as never, from: "InProgress", to: "Failed" }
            }
          )
          return { migrated, ended: { verify: yield* j.verify, runs: yield* runsOf(j) } }
        })
      )
      assert.deepStrictEqual(opened.migrated.verify, { ok: true, checked: 9 } as never)
      assert.deepStrictEqual(opened.migrated.runs, [
        { endSeq: 4, texts: expected[0]! },
        { endSeq: 7, texts: expected[1]! },
        { endSeq: undefined, texts: expected[2]! }
      ])
      assert.deepStrictEqual(opened.ended.verify, { ok: true, checked: 10 } as never)
      assert.deepStrictEqual(opened.ended.runs.at(-1), { endSeq: 10, texts: ["m6", "m8", "m10"] })
      // Edited behind the journal's back, the new column is named by verify.
      const edit = new Database(filename)
      edit.prepare("UPDATE runs SET end_seq = 2 WHERE id = ?").run(rid(1))
      edit.close()
      const tampered = yield* Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
      assert.deepInclude(tampered as never, { ok: false, reason: "row_edited" })
      assert.deepStrictEqual((tampered as { row?: { columns: unknown } }).row?.columns, ["end_seq"])
      const forged = yield* Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename: edited }), (j) => j.verify))
      assert.deepInclude(forged as never, { ok: false, reason: "row_edited" })
      // Named, with the edited column (its version, from before the upgrade, has no `end_seq` either).
      const row = (forged as { row?: { table: string; id: string; columns: Array<string> } }).row
      assert.deepStrictEqual([row?.table, row?.id], ["runs", rid(2)])
      // Only the edited column: its version has no hint for `end_seq`, which nobody edited.
      assert.deepStrictEqual(row?.columns, ["input"])
    })
  )
})

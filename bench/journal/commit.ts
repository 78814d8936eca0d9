/**
 * bench/journal/commit.ts: the writer's commit alone, on this thread (no worker, no Effect): batches
 * of already-encoded appends through `makeWriter`, CPU µs per append (`process.threadCpuUsage`):
 * `node --conditions=@palyra/source --import tsx bench/journal/commit.ts [appends] [batch] [rounds] [module]`
 * (`batch`: appends per commit, 32 ≈ the 32-writer phase, 1 = a lone append; `module`: the writer
 * module to load, for before/after comparisons in one sitting; `SESSIONS` (default 32) the sessions
 * the appends go to in turn, `RUNS=1` every append also creates a run, `RUN_EVENTS=1` every event carries
 * its session's run id as a run's events do, `RUN_INDEX=1` the tape's run index migration 0010 dropped,
 * `AUTOCHECKPOINT=n` the connection's `wal_autocheckpoint`, `PAGE_SIZE=n` each file created with that
 * page size).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Canonical, Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import Database from "better-sqlite3"
import { Effect } from "effect"
import type { AppendOp } from "../../packages/journal/src/internal/protocol.js"
import type { Writer } from "../../packages/journal/src/internal/writer.js"
import { round } from "../lib/report.js"
import { event, sid } from "./events.js"

const appends = Number(process.argv[2] ?? 20000)
const batch = Number(process.argv[3] ?? 32)
const rounds = Number(process.argv[4] ?? 3)
const SESSIONS = Number(process.env.SESSIONS ?? 32)
/** `RUNS=1`: every append also creates a run (a version on the record chain). */
const RUNS = process.env.RUNS === "1"
/** `RUN_EVENTS=1`: every event carries its session's run id (as a run's events do in the daemon). */
const RUN_EVENTS = process.env.RUN_EVENTS === "1"
/** `PAGE_SIZE=n`: create each file with this SQLite page size first (default: the journal's own). */
const PAGE_SIZE = process.env.PAGE_SIZE
const module = process.argv[5] ?? "../../packages/journal/src/internal/writer.js"
const { makeWriter } = (await import(module)) as { makeWriter: (db: Database.Database, maxBatch: number) => Writer }

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-commit-"))
for (let r = 0; r < rounds; r++) {
  const filename = join(dir, `c${r}.db`)
  if (PAGE_SIZE !== undefined) {
    const db = new Database(filename)
    db.pragma(`page_size = ${Number(PAGE_SIZE)}`)
    db.pragma("journal_mode = WAL")
    db.close()
  }
  // The schema and 32 sessions through the journal itself, then the writer on its own connection.
  await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const j = yield* SqliteJournal.make({ filename, writer: "inline" })
        for (let w = 0; w < 32; w++)
          yield* j.createSession(Records.makeSession({ id: sid(w) as never, principal: "b" }))
      })
    )
  )
  const db = new Database(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  db.pragma("foreign_keys = ON")
  db.pragma("secure_delete = ON")
  // `RUN_INDEX=1`: the tape's run index as before migration 0010 (a before/after in one sitting).
  if (process.env.RUN_INDEX === "1")
    db.exec("CREATE INDEX tape_events_run ON tape_events(run_id, tape_seq) WHERE run_id IS NOT NULL")
  if (process.env.AUTOCHECKPOINT !== undefined) db.pragma(`wal_autocheckpoint = ${Number(process.env.AUTOCHECKPOINT)}`)
  const writer = makeWriter(db, 64)
  const op = (i: number): AppendOp => {
    const s = sid(i % SESSIONS)
    const { _tag, at, runId, sessionId: _s, ...body } = event(s, i)
    const events = [
      {
        tag: _tag,
        runId: RUN_EVENTS ? `01KR${String(i % SESSIONS).padStart(22, "0")}` : runId,
        at,
        payload: Canonical.canonicalJson(body)
      }
    ]
    if (!RUNS) return { op: "append", sessionId: s, events, effects: {} }
    // A run's start: the run row and its record version in the append (a turn's admission).
    const run = `01KR${String(i).padStart(22, "0")}`
    return {
      op: "append",
      sessionId: s,
      events,
      effects: { createRun: [run, s, "b", "pending", "{}", 0, null, null, at, at] }
    }
  }
  const ops = Array.from({ length: appends }, (_, i) => op(i))
  const cpu = process.threadCpuUsage()
  const start = performance.now()
  for (let i = 0; i < appends; i += batch) {
    const results = writer.commit(ops.slice(i, i + batch))
    if (!results.every((x) => x.ok)) throw new Error("a commit failed")
  }
  const used = process.threadCpuUsage(cpu)
  const elapsed = performance.now() - start
  db.close()
  console.log(
    JSON.stringify({
      batch,
      cpuUsPerAppend: round((used.user + used.system) / appends, 2),
      sysUsPerAppend: round(used.system / appends, 2),
      wallUsPerAppend: round((elapsed * 1000) / appends, 2)
    })
  )
}
rmSync(dir, { recursive: true, force: true })

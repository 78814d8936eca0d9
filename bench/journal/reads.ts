/**
 * bench/journal/reads.ts: the journal's read paths on a file written like a daemon's (`sessions`
 * sessions, `runs` runs each, `events` events per run carrying their run id, tool-result sized):
 * `node --conditions=@palyra/source --import tsx bench/journal/reads.ts [sessions] [runs] [events] [rounds]`.
 * Prints one JSON line per round: µs per `readTape` of a whole session, per `readTape` of one run
 * (from its first seq, as `Journal.readRunTape` reads: any run, and the session's last), per `headSeq`, and ms per `verify` of the
 * whole file, plus the file's page size (`RUN_INDEX=1` adds the run index migration 0010 dropped, for a before/after in one sitting).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Canonical, Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import Database from "better-sqlite3"
import { Effect } from "effect"
import type { AppendOp } from "../../packages/journal/src/internal/protocol.js"
import { makeWriter } from "../../packages/journal/src/internal/writer.js"
import { round } from "../lib/report.js"
import { event, sid } from "./events.js"

const sessions = Number(process.argv[2] ?? 200)
const runs = Number(process.argv[3] ?? 20)
const events = Number(process.argv[4] ?? 10)
const rounds = Number(process.argv[5] ?? 3)
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-reads-"))
const filename = join(dir, "reads.db")
const rid = (s: number, r: number) => `01KR${String(s * 10_000 + r).padStart(22, "0")}`

// The file: sessions through the journal, then the events on a writer of its own (no Effect per append).
await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const j = yield* SqliteJournal.make({ filename, writer: "inline" })
      for (let s = 0; s < sessions; s++)
        yield* j.createSession(Records.makeSession({ id: sid(s) as never, principal: "b" }))
    })
  )
)
{
  const db = new Database(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("foreign_keys = ON")
  // `RUN_INDEX=1`: the tape's run index as before migration 0010 (for a before/after in one sitting).
  if (process.env.RUN_INDEX === "1")
    db.exec("CREATE INDEX tape_events_run ON tape_events(run_id, tape_seq) WHERE run_id IS NOT NULL")
  const writer = makeWriter(db, 256)
  const ops: Array<AppendOp> = []
  // Runs interleave across sessions, as concurrent sessions' runs do.
  for (let r = 0; r < runs; r++)
    for (let e = 0; e < events; e++)
      for (let s = 0; s < sessions; s++) {
        const { _tag, at, sessionId: _s, runId: _r, ...body } = event(sid(s), r * events + e)
        const runId = rid(s, r)
        ops.push({
          op: "append",
          sessionId: sid(s),
          events: [{ tag: _tag, runId, at, payload: Canonical.canonicalJson(body) }],
          effects: e === 0 ? { createRun: [runId, sid(s), "b", "pending", "{}", 0, null, null, at, at] } : {}
        })
      }
  for (let i = 0; i < ops.length; i += 64) writer.commit(ops.slice(i, i + 64))
  db.close()
}

const time = <A>(n: number, f: (i: number) => A) => {
  const t = performance.now()
  for (let i = 0; i < n; i++) f(i)
  return ((performance.now() - t) * 1000) / n
}
for (let k = 0; k < rounds; k++) {
  const out = await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const j = yield* SqliteJournal.make({ filename, writer: "inline" })
        const run = Effect.runSync
        const n = Math.min(sessions, 200)
        const session = time(n, (i) => run(j.readTape(sid(i % sessions) as never, { afterSeq: 0 })))
        const ofRun = time(n * 5, (i) => {
          const s = i % sessions
          const r = Math.floor(i / sessions) % runs
          return run(j.readTape(sid(s) as never, { afterSeq: r * events, runId: rid(s, r) as never }))
        })
        // The run that just ended: the session's last (what after-run work reads).
        const lastRun = time(n, (i) => {
          const s = i % sessions
          return run(j.readTape(sid(s) as never, { afterSeq: (runs - 1) * events, runId: rid(s, runs - 1) as never }))
        })
        const head = time(n * 20, (i) => run(j.headSeq(sid(i % sessions) as never)))
        const t = performance.now()
        const verified = run(j.verify)
        if (!verified.ok) throw new Error("verify failed")
        const db = new Database(filename, { readonly: true })
        const pageSize = db.pragma("page_size", { simple: true })
        db.close()
        return {
          pageSize,
          readSessionUs: round(session, 1),
          readRunUs: round(ofRun, 1),
          readLastRunUs: round(lastRun, 1),
          headSeqUs: round(head, 2),
          verifyMs: round(performance.now() - t, 1)
        }
      })
    )
  )
  console.log(JSON.stringify(out))
}
rmSync(dir, { recursive: true, force: true })

/**
 * bench/journal/run-tape.ts: reading an OLD run of a long session (`Journal.readRunTape`) on the
 * SQLite journal — the session's first run, after `events` more events of later runs. With the run's
 * `endSeq` (recorded by its terminal commit since migration 0011) the read takes `[startSeq, endSeq]`;
 * without it (a run ended before 0011 and not backfilled, or the read before this change) it scans
 * everything after the run's start. Both on the same file, alternating:
 * `node --conditions=@palyra/source --import tsx bench/journal/run-tape.ts [events=300000] [reads=20]`.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Journal, Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"

const events = Number(process.argv[2] ?? 300_000)
const reads = Number(process.argv[3] ?? 20)
const dir = mkdtempSync(join(tmpdir(), "palyra-run-tape-"))
const filename = join(dir, "bench.db")
const at = 1_700_000_000_000
const sessionId = "01KA0000000000000000000001" as Records.Session["id"]
const rid = (i: number) => `01KR${String(i).padStart(22, "0")}` as Records.Run["id"]
const note = (runId: Records.Run["id"], i: number) =>
  ({ _tag: "SessionNote", sessionId, runId, at: at + i, author: "bench", text: `event ${i}` }) as const
const run = (i: number, startSeq: number): Records.Run => ({
  id: rid(i),
  sessionId,
  principal: "bench",
  state: "Pending",
  input: "x",
  startSeq,
  error: null,
  createdAt: at,
  updatedAt: at
})

const program = Effect.gen(function* () {
  const j = yield* SqliteJournal.make({ filename, writer: "inline", maxBatch: 4096 })
  yield* j.createSession(Records.makeSession({ id: sessionId, principal: "bench" }))
  // The first run: 5 events, then ended.
  yield* j.append(sessionId, [note(rid(0), 0), note(rid(0), 1)], { createRun: run(0, 1) })
  yield* j.append(sessionId, [note(rid(0), 2), note(rid(0), 3), note(rid(0), 4)], {
    runTransition: { runId: rid(0), from: "Pending", to: "Cancelled" }
  })
  // Later runs: 50 events each, appended 50 at a time, concurrently in batches.
  const t0 = performance.now()
  for (let r = 1; r * 50 <= events; r += 40) {
    yield* Effect.forEach(
      Array.from({ length: Math.min(40, events / 50 - r + 1) }, (_, k) => r + k),
      (n) => j.append(sessionId, Array.from({ length: 50 }, (_, i) => note(rid(n), n * 50 + i)) as never, {}),
      { concurrency: "unbounded" }
    )
  }
  const built = performance.now() - t0
  const first = yield* Journal.requireRun(j, rid(0))
  const { endSeq: _, ...unbounded } = first
  const time = (r: Records.Run) =>
    Effect.gen(function* () {
      const c0 = process.cpuUsage()
      const w0 = performance.now()
      const got = yield* Journal.readRunTape(j, r)
      const c = process.cpuUsage(c0)
      if (got.length !== 5) throw new Error(`read ${got.length} events`)
      return { ms: performance.now() - w0, cpuMs: (c.user + c.system) / 1000 }
    })
  const bounded: Array<number> = []
  const scanned: Array<number> = []
  for (let i = 0; i < reads; i++) {
    bounded.push((yield* time(first)).ms)
    scanned.push((yield* time(unbounded)).ms)
  }
  const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  console.log(`session of ${(yield* j.headSeq(sessionId)).toLocaleString()} events (built in ${Math.round(built)} ms)`)
  console.log(`first run's tape, [startSeq, endSeq] (endSeq ${first.endSeq}): ${median(bounded).toFixed(3)} ms`)
  console.log(`first run's tape, from startSeq on (no endSeq): ${median(scanned).toFixed(3)} ms`)
  console.log(
    JSON.stringify({
      bench: "run-tape",
      events,
      boundedMs: Math.round(median(bounded) * 1000) / 1000,
      unboundedMs: Math.round(median(scanned) * 1000) / 1000
    })
  )
})

await Effect.runPromise(Effect.scoped(program))
rmSync(dir, { recursive: true, force: true })

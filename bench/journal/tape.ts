/**
 * bench/journal/tape.ts: the tape's append over the SQLite journal (worker writer), in process:
 * `writers` sessions each appending one streamed-text delta at a time (uninterruptibly, as the loop
 * does) through core's tape, one live follower per session taking what is published. Compares the
 * tape's two forms of an append, alternating in one sitting (one process per run):
 * `plain` (`Journal.appendNow`: one `Effect.async` per append) and `effect` (the journal's `append`
 * under the tape's Effect lock, what a decorated journal gets).
 * `node --conditions=@palyra/source --import tsx bench/journal/tape.ts [mode] [perWriter] [writers]`
 * prints one JSON line: the main thread's and the process's CPU µs per append.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type Journal, Records, type TapeEvent } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"
import { makeTape } from "../../packages/core/src/kernel/internal/tape.js"
import { round } from "../lib/report.js"

const mode = process.argv[2] === "effect" ? "effect" : "plain"
const perWriter = Number(process.argv[3] ?? 2000)
const writers = Number(process.argv[4] ?? 32)
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-tape-"))
const sid = (i: number) => `01KA${String(i).padStart(22, "0")}` as never
const RUN = "01KA0000000000000000000RUN" as never
const delta = (s: string, i: number) =>
  ({
    _tag: "TextDelta",
    sessionId: s,
    runId: RUN,
    at: Date.now(),
    text: `word${i} `
  }) as unknown as TapeEvent.NewTapeEvent

const program = Effect.scoped(
  Effect.gen(function* () {
    const sqlite = yield* SqliteJournal.make({ filename: join(dir, "t.db") })
    // `effect`: the same journal with `append` replaced, which drops the plain form (as any decorator does).
    const journal: Journal.Service =
      mode === "effect" ? { ...sqlite, append: (s, e, x) => sqlite.append(s, e, x) } : sqlite
    for (let w = 0; w < writers; w++) yield* journal.createSession(Records.makeSession({ id: sid(w), principal: "b" }))
    const tape = yield* makeTape(journal)
    let received = 0
    for (let w = 0; w < writers; w++) {
      const f = yield* tape.follow(sid(w), 0)
      const drain = () => {
        for (;;) {
          const r = f.take()
          if (r === undefined) return f.onReady(drain)
          if (!Array.isArray(r)) return
          received += r.length
        }
      }
      drain()
    }
    const writer = (w: number, count: number) =>
      Effect.forEach(
        Array.from({ length: count }, (_, i) => i),
        (i) => Effect.uninterruptible(tape.append(sid(w), [delta(sid(w), i)])),
        { discard: true }
      )
    const all = (count: number) =>
      Effect.forEach(
        Array.from({ length: writers }, (_, w) => w),
        (w) => writer(w, count),
        { concurrency: "unbounded", discard: true }
      )
    yield* all(200) // warm-up
    const main0 = process.threadCpuUsage()
    const proc0 = process.cpuUsage()
    const t0 = performance.now()
    yield* all(perWriter)
    const ms = performance.now() - t0
    const main = process.threadCpuUsage(main0)
    const proc = process.cpuUsage(proc0)
    const n = writers * perWriter
    if (received < writers * (perWriter + 200)) throw new Error(`followers saw ${received} events`)
    console.log(
      JSON.stringify({
        bench: "journal-tape",
        mode,
        appends: n,
        eventsPerSec: Math.round(n / (ms / 1000)),
        mainCpuUsPerAppend: round((main.user + main.system) / n, 2),
        cpuUsPerAppend: round((proc.user + proc.system) / n, 2)
      })
    )
  })
)
await Effect.runPromise(program)
rmSync(dir, { recursive: true, force: true })

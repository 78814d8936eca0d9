/**
 * bench/journal/appends.ts: only the 32-writer append phase of `bench journal`, alternating the
 * journal's writers (worker thread, inline) in one sitting, for before/after comparisons:
 * `node --conditions=@palyra/source --import tsx bench/journal/appends.ts [rounds] [perWriter] [writers]`
 * (`writers`: `worker,inline` by default, or one of them).
 * Prints events/s, the event-loop delay p99, the main thread's busy µs per append (event-loop
 * utilization: the worker's commits are not counted, they run on another thread; on a loaded machine
 * it also counts the time the thread was descheduled), the main thread's CPU µs per append
 * (`process.threadCpuUsage`), the writer thread's CPU µs per append (`Worker.cpuUsage`, worker writer
 * only) and the process's CPU µs per append (all threads: GC helpers too).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Worker } from "node:worker_threads"
import { Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"
import { loopProbe, round } from "../lib/report.js"
import { closedLoop, event, sid } from "./events.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-appends-"))

let n = 0
/** `IDLE_FRAMES=n`: the writer's idle-checkpoint threshold (`CheckpointPolicy.idleFrames`) instead of the default. */
const IDLE_FRAMES = process.env.IDLE_FRAMES === undefined ? undefined : Number(process.env.IDLE_FRAMES)
const phase = (writer: SqliteJournal.WriterMode, perWriter: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      let thread: Worker | undefined
      const j = yield* SqliteJournal.make({
        filename: join(dir, `a${n++}.db`),
        writer,
        ...(IDLE_FRAMES === undefined ? {} : { checkpoint: { idleFrames: IDLE_FRAMES, maxFrames: 10_000 } }),
        onWorker: (w) => {
          thread = w
        }
      })
      const threadCpu = () => (thread ? Effect.promise(() => thread!.cpuUsage()) : Effect.succeed(undefined))
      for (let w = 0; w < 32; w++) yield* j.createSession(Records.makeSession({ id: sid(w) as never, principal: "b" }))
      yield* Effect.forEach(Array.from({ length: 200 }), (_, i) => j.append(sid(0) as never, [event(sid(0), i)]), {
        concurrency: 32
      })
      const probe = loopProbe()
      let elu = performance.eventLoopUtilization()
      const cpu = process.cpuUsage()
      const mainCpu = process.threadCpuUsage()
      const workerCpu = yield* threadCpu()
      const start = performance.now()
      yield* closedLoop(32, perWriter, (w, i) => j.append(sid(w) as never, [event(sid(w), i)]))
      const elapsed = performance.now() - start
      elu = performance.eventLoopUtilization(elu)
      const used = process.cpuUsage(cpu)
      const usedMain = process.threadCpuUsage(mainCpu)
      const workerAfter = yield* threadCpu()
      const loop = probe.stop()
      return {
        writer,
        perSec: Math.round((32 * perWriter) / (elapsed / 1000)),
        loopP99: round(loop.p99, 2),
        mainUs: round((elu.active * 1000) / (32 * perWriter), 1),
        mainCpuUs: round((usedMain.user + usedMain.system) / (32 * perWriter), 1),
        mainSysUs: round(usedMain.system / (32 * perWriter), 1),
        ...(workerCpu && workerAfter
          ? {
              workerCpuUs: round(
                (workerAfter.user + workerAfter.system - workerCpu.user - workerCpu.system) / (32 * perWriter),
                1
              ),
              workerSysUs: round((workerAfter.system - workerCpu.system) / (32 * perWriter), 1)
            }
          : {}),
        cpuUs: round((used.user + used.system) / (32 * perWriter), 1)
      }
    })
  )

const rounds = Number(process.argv[2] ?? 3)
const perWriter = Number(process.argv[3] ?? 300)
const writers = (process.argv[4] ?? "worker,inline").split(",") as Array<SqliteJournal.WriterMode>
for (let r = 0; r < rounds; r++) {
  for (const writer of writers) console.log(JSON.stringify(await Effect.runPromise(phase(writer, perWriter))))
}
rmSync(dir, { recursive: true, force: true })

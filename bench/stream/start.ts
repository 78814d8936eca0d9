/**
 * bench/stream/start: the in-process CPU cost of one run start — `Gateway.startRun` (admission, a new
 * keyed session, the run's first appends) to the run's first model call — on the same Gateway as
 * `bench/stream` (real SQLite journal file, the scripted model). The model holds every run's first
 * delta back (`delayPerDelta`) so the measured CPU is the starts only; N runs start in one burst
 * (like the paced stream phases) and one after another (the cost of one start with nothing else
 * running). Also reports how long the burst took to reach every first model call.
 *
 * Run alone: `node --conditions=@palyra/source --import tsx bench/stream/start.ts [--quick]`
 * (add `--cpu-prof --cpu-prof-dir=<dir>` for a profile; summarize with `bench/lib/cpuprof.mjs`).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Caller, Gateway, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { SqliteJournal } from "@palyra/journal"
import { Effect, type Layer, ManagedRuntime, Scope } from "effect"

const quick = process.argv.includes("--quick")
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-start-"))
let called = 0
let onCall: (() => void) | undefined
const model = ScriptedModel.make(
  () => {
    called++
    onCall?.()
    return { text: ["x"], delayPerDelta: "300 millis" }
  },
  { recordPrompts: false }
)
const runtime = ManagedRuntime.make(
  gatewayLayer({
    model,
    journal: SqliteJournal.layer({ filename: join(dir, "start.db") }),
    coalesceChars: 1,
    // BENCH_STARTS=<n>: the Gateway's start gate (`maxConcurrentStarts`, default 4; Infinity: none).
    ...(process.env.BENCH_STARTS === undefined ? {} : { maxConcurrentStarts: Number(process.env.BENCH_STARTS) })
  }) as Layer.Layer<Gateway.Gateway>
)
const caller = Caller.user("bench")
let key = 0

/** Start `n` runs (all at once or one after another); resolves at the n-th first model call. */
const burst = async (n: number, concurrent: boolean) => {
  const target = called + n
  const reached = new Promise<void>((resolve) => {
    onCall = () => called >= target && resolve()
  })
  const scope = await runtime.runPromise(Scope.make())
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  // Each start opens its run's follower (like a RunStream does) and keeps it until the run ends.
  const start = () =>
    Effect.flatMap(Gateway.Gateway, (g) => g.startRun(caller, { text: "hi", key: `s${key++}` })).pipe(
      Effect.flatMap((r) => r.follow),
      Scope.extend(scope)
    )
  await runtime.runPromise(
    Effect.forEach(Array.from({ length: n }), start, { concurrency: concurrent ? "unbounded" : 1, discard: true })
  )
  await reached
  const wallMs = performance.now() - t0
  const cpu = process.cpuUsage(c0)
  onCall = undefined
  // Let the runs finish (their one held-back delta), then close their followers.
  await new Promise((r) => setTimeout(r, 600))
  await runtime.runPromise(Scope.close(scope, { _tag: "Success", value: undefined } as never))
  return { cpuUsPerStart: (cpu.user + cpu.system) / n, wallMs }
}

const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

/** Figures: CPU µs per start in a burst of `n` and one at a time; the burst's wall time to the last first call. */
export const measureStarts = async (n: number, rounds: number) => {
  await burst(20, true)
  await burst(20, false)
  const inBurst: Array<number> = []
  const alone: Array<number> = []
  const burstMs: Array<number> = []
  for (let r = 0; r < rounds; r++) {
    const b = await burst(n, true)
    inBurst.push(b.cpuUsPerStart)
    burstMs.push(b.wallMs)
    alone.push((await burst(Math.min(n, 50), false)).cpuUsPerStart)
  }
  return { startCpuUsBurst: median(inBurst), startCpuUsAlone: median(alone), burstToLastCallMs: median(burstMs) }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const n = quick ? 50 : 200
  const figures = await measureStarts(n, quick ? 3 : 7)
  console.log(`run start, ${n} runs: CPU µs per start in a burst / alone; ms from burst to the last first model call`)
  console.log(JSON.stringify({ bench: "start", runs: n, ...figures }))
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
}

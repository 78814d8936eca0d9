// Bench-only preload for the daemon (`node --import <this> palyrad.js`, with BENCH_TURN_TRACE=<dir>):
// every GC (kind, start, duration, on the wall clock) and the event loop's delay histogram, written
// to <dir>/daemon.<pid>.json at the first SIGUSR2 (the bench sends it after the turns). With the
// client's slow turns (the same dir), `node bench/turn/trace-report.mjs <dir>` says what the slow
// turns overlapped.
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { constants, monitorEventLoopDelay, PerformanceObserver, performance } from "node:perf_hooks"
import { watchStalls, watchTimers } from "./stalls.mjs"

const dir = process.env.BENCH_TURN_TRACE
if (dir) {
  const kinds = {
    [constants.NODE_PERFORMANCE_GC_MAJOR]: "major",
    [constants.NODE_PERFORMANCE_GC_MINOR]: "minor",
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental",
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: "weakcb"
  }
  const gcs = []
  const origin = performance.timeOrigin
  new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      gcs.push({ kind: kinds[e.detail?.kind] ?? String(e.detail?.kind), at: origin + e.startTime, ms: e.duration })
  }).observe({ entryTypes: ["gc"] })
  const delay = monitorEventLoopDelay({ resolution: 1 })
  delay.enable()
  // BENCH_TURN_STALLS=1 (bench/turn/tail-stages.ts): when the loop was held, and the slow timer callbacks.
  const stalls = process.env.BENCH_TURN_STALLS === "1" ? watchStalls() : undefined
  const timers = process.env.BENCH_TURN_STALLS === "1" ? watchTimers() : undefined
  process.once("SIGUSR2", () => {
    delay.disable()
    const ms = (ns) => Math.round(ns / 1e4) / 100
    writeFileSync(
      join(dir, `daemon.${process.pid}.json`),
      JSON.stringify({
        // The monotonic clock V8's CPU profiles use (µs) beside the wall clock, to place profile samples.
        clock: { wall: performance.timeOrigin + performance.now(), monoUs: Number(process.hrtime.bigint() / 1000n) },
        eventLoopDelay: { p50: ms(delay.percentile(50)), p99: ms(delay.percentile(99)), max: ms(delay.max) },
        gcs,
        ...(stalls ? { stalls: stalls.stop(), slowTimers: timers.slow } : {})
      })
    )
  })
}

/**
 * Give memory back when the daemon goes quiet after work.
 *
 * V8 keeps the heap pages a garbage collection frees in a pool for reuse, still resident, and
 * releases that pool only in a *memory-reducing* collection (its memory reducer, a low-memory
 * notification). Its memory reducer starts only after an allocation-triggered mark-compact, which
 * a burst of short requests (a few hundred sessions created, a few hundred turns) does not cause:
 * measured on palyrad, 1,000 `POST /v1/sessions` left ~38 MB of pooled pages resident indefinitely
 * (`--trace-gc-verbose`: "Pool buffering 148 chunks"), while the live heap grew by ~2 MB.
 *
 * So the daemon watches its own event-loop utilization: once it has done at least `minActiveMs` of
 * work since the last reduction and then a whole `intervalMs` window stays under `idleUtilization`,
 * it runs one memory-reducing full collection (`gc({ type: "major", flavor: "last-resort" })`,
 * which releases the pool and shrinks the young generation). It never runs while the daemon is busy,
 * never twice without work in between, and costs one full GC (tens of milliseconds for a ~30 MB
 * heap) per busy-then-quiet transition.
 *
 * `gc` is not exposed to a normal Node process; `--expose-gc` set at run time takes effect in
 * contexts created afterwards, so the function is read from a fresh `vm` context (the well-known
 * technique of the `expose-gc` package, a few lines, not worth a dependency).
 *
 * @internal
 */

import { performance } from "node:perf_hooks"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { Duration, Effect, Metric, Schedule } from "effect"

/** A memory-reducing full collection. @internal */
export type ReducingGc = () => void

/** @internal */
export interface MemoryReducerOptions {
  /** How often utilization is sampled; a reduction needs one whole quiet window. Default 2 s. */
  readonly intervalMs?: number
  /** Event-loop utilization (0–1) under which a window counts as quiet. Default 0.05. */
  readonly idleUtilization?: number
  /** Event-loop active time since the last reduction needed before another one. Default 500 ms. */
  readonly minActiveMs?: number
  /**
   * No reduction while the live heap is above this many bytes (default 64 MB): the collection is
   * synchronous and its pause grows with the heap (~30 ms at 30 MB, ~270 ms at 100 MB measured), and
   * "quiet" can still mean a run streaming from a slow model. A heap that large is collected by
   * V8's own allocation-triggered collections anyway.
   */
  readonly maxHeapBytes?: number | undefined
  /** The collection to run (tests count calls); default: V8's, see `reducingGc`. */
  readonly gc?: ReducingGc
}

type GcFunction = (options?: { type?: "major" | "minor"; execution?: "sync" | "async"; flavor?: string }) => void

/**
 * V8's memory-reducing full collection, or `undefined` when this runtime does not offer `gc`.
 *
 * @internal
 */
export const reducingGc = (): ReducingGc | undefined => {
  let gc = (globalThis as { gc?: GcFunction }).gc
  if (gc === undefined) {
    setFlagsFromString("--expose-gc")
    gc = runInNewContext("gc") as GcFunction | undefined
  }
  if (typeof gc !== "function") return undefined
  const collect = gc
  return () => collect({ type: "major", execution: "sync", flavor: "last-resort" })
}

const reductions = Metric.counter("palyra_memory_reductions", {
  description: "Memory-reducing full collections run after the daemon went quiet"
})

/**
 * Sample event-loop utilization forever (fork it in the daemon's scope) and run a memory-reducing
 * collection on each busy-then-quiet transition. The decision is a pure function of the samples.
 *
 * @internal
 */
export const run = (options: MemoryReducerOptions = {}): Effect.Effect<void> =>
  Effect.suspend(() => {
    const intervalMs = options.intervalMs ?? 2000
    const idle = options.idleUtilization ?? 0.05
    const minActiveMs = options.minActiveMs ?? 500
    const maxHeapBytes = options.maxHeapBytes ?? 64 * 1024 * 1024
    const gc = options.gc ?? reducingGc()
    if (gc === undefined) return Effect.logDebug("memory reducer off: this runtime exposes no gc")
    let last = performance.eventLoopUtilization()
    let activeSinceReduction = 0
    const sample = Effect.gen(function* () {
      const now = performance.eventLoopUtilization()
      const window = performance.eventLoopUtilization(now, last)
      last = now
      activeSinceReduction += window.active
      if (window.utilization >= idle || activeSinceReduction < minActiveMs) return
      if (process.memoryUsage().heapUsed > maxHeapBytes) return
      activeSinceReduction = 0
      yield* reduce
    })
    const reduce = Effect.gen(function* () {
      const before = process.memoryUsage.rss()
      const started = performance.now()
      gc()
      // The collection itself is event-loop work; do not count it towards the next reduction.
      last = performance.eventLoopUtilization()
      yield* Metric.increment(reductions)
      yield* Effect.logDebug("memory reduced after a quiet window").pipe(
        Effect.annotateLogs({
          gcMs: Math.round(performance.now() - started),
          rssBeforeMb: Math.round(before / 1048576),
          rssAfterMb: Math.round(process.memoryUsage.rss() / 1048576)
        })
      )
    }).pipe(Effect.withSpan("daemon.reduceMemory"))
    return Effect.repeat(sample, Schedule.spaced(Duration.millis(intervalMs))).pipe(
      Effect.delay(Duration.millis(intervalMs)),
      Effect.asVoid
    )
  })

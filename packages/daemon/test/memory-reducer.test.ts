/**
 * The memory reducer: one memory-reducing collection per busy-then-quiet transition, none while
 * idle without work in between, and V8's real collection releases the pages a burst left pooled.
 * Real event loop, real time, real V8 (no fake clock: utilization is measured by Node).
 */
import { spawnSync } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Fiber } from "effect"
import { expect, it } from "vitest"
import * as MemoryReducer from "../src/internal/memoryReducer.js"

const here = dirname(fileURLToPath(import.meta.url))
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Event-loop work: build and hash strings for about `ms` milliseconds, in slices. */
const work = async (ms: number) => {
  const until = performance.now() + ms
  let acc = 0
  while (performance.now() < until) {
    for (let i = 0; i < 2000; i++) acc += JSON.stringify({ i, s: `x${i}` }).length
    await new Promise((r) => setImmediate(r))
  }
  return acc
}

it("collects once after work followed by a quiet window, and not again while idle", async () => {
  let calls = 0
  const fiber = Effect.runFork(
    MemoryReducer.run({ intervalMs: 200, idleUtilization: 0.2, minActiveMs: 150, gc: () => void calls++ })
  )
  try {
    await sleep(700) // idle from the start: no work yet, so no collection
    expect(calls).toBe(0)
    await work(600)
    await sleep(900) // quiet windows follow: exactly one collection
    expect(calls).toBe(1)
    await sleep(800) // still idle, no new work: none
    expect(calls).toBe(1)
    await work(600)
    await sleep(900)
    expect(calls).toBe(2)
  } finally {
    await Effect.runPromise(Fiber.interrupt(fiber))
  }
})

it("does not collect while the live heap is above its limit (the pause grows with the heap)", async () => {
  let calls = 0
  const fiber = Effect.runFork(
    MemoryReducer.run({
      intervalMs: 200,
      idleUtilization: 0.2,
      minActiveMs: 150,
      maxHeapBytes: 1,
      gc: () => void calls++
    })
  )
  try {
    await work(600)
    await sleep(900) // work, then quiet windows: with any heap above the limit, still none
    expect(calls).toBe(0)
  } finally {
    await Effect.runPromise(Fiber.interrupt(fiber))
  }
})

it("V8's memory-reducing collection is available in a plain node process and returns memory an ordinary one keeps", () => {
  // A child process without --expose-gc, like palyrad: a burst of allocation (some of it surviving
  // a while, as a burst of requests does), then RSS after an ordinary full collection (the control)
  // and after the reducing one.
  const script = `
    import { setFlagsFromString } from "node:v8"
    import { runInNewContext } from "node:vm"
    import { reducingGc } from ${JSON.stringify(join(here, "../src/internal/memoryReducer.ts"))}
    const reduce = reducingGc()
    if (reduce === undefined) throw new Error("no gc")
    setFlagsFromString("--expose-gc")
    const ordinary = runInNewContext("gc")
    const live = []
    for (let round = 0; round < 60; round++) {
      const batch = []
      for (let i = 0; i < 20000; i++) batch.push({ i, s: "x".repeat(40) + i })
      live.push(batch)
      if (live.length > 8) live.shift()
    }
    live.length = 0
    ordinary({ type: "major", execution: "sync" })
    const afterOrdinary = process.memoryUsage.rss()
    reduce()
    const afterReducing = process.memoryUsage.rss()
    process.stdout.write(JSON.stringify({ afterOrdinary, afterReducing }))
  `
  const out = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: here,
    encoding: "utf8"
  })
  expect(out.stderr).toBe("")
  const { afterOrdinary, afterReducing } = JSON.parse(out.stdout) as { afterOrdinary: number; afterReducing: number }
  expect(afterOrdinary - afterReducing).toBeGreaterThan(8 * 1024 * 1024)
})

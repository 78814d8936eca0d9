/**
 * bench/loop/ops.ts: Effect operations (fiber run-loop steps) and fibers per step of the 10-step tool
 * loop — a count, so unlike CPU time it does not move with the machine's load:
 * `node --conditions=@palyra/source --import tsx bench/loop/ops.ts [runs]`. It wraps the methods of
 * Effect's `FiberRuntime` that execute each operation (by opcode), so it measures the same build of
 * `effect` that `@palyra/core` loads.
 */
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { pathToFileURL } from "node:url"
import { oursOnce as once, runtime, STEPS } from "./ours.js"

const main = async () => {
  const runs = Number(process.argv[2] ?? 200)
  const require = createRequire(import.meta.url)
  const root = dirname(require.resolve("effect/package.json", { paths: [require.resolve("@palyra/core")] }))
  const fr = await import(pathToFileURL(join(root, "dist/esm/internal/fiberRuntime.js")).href)
  const proto = fr.FiberRuntime.prototype as Record<string, unknown>
  const counts = new Map<string, number>()
  let fibers = 0
  for (const op of [
    "Tag",
    "Left",
    "Right",
    "Some",
    "None",
    "Micro",
    "Sync",
    "Success",
    "Failure",
    "WithRuntime",
    "UpdateRuntimeFlags",
    "OnSuccess",
    "OnFailure",
    "OnSuccessAndFailure",
    "Async",
    "Yield",
    "While",
    "Iterator",
    "Commit"
  ]) {
    const original = proto[op]
    if (typeof original !== "function") continue
    proto[op] = function (this: unknown, ...args: Array<unknown>) {
      counts.set(op, (counts.get(op) ?? 0) + 1)
      return (original as (...a: Array<unknown>) => unknown).apply(this, args)
    }
  }
  // A fiber begins with `start` (run synchronously: `runPromise`, `runSync`, `immediate`) or
  // `resume` (a fork, `Runtime.runFork`) or `startFork` (a race's two sides): all are counted.
  for (const begin of ["start", "startFork", "resume"]) {
    const original = proto[begin] as (...a: Array<unknown>) => unknown
    proto[begin] = function (this: unknown, ...args: Array<unknown>) {
      fibers++
      return original.apply(this, args)
    }
  }
  for (let i = 0; i < 20; i++) await runtime.runPromise(once)
  counts.clear()
  fibers = 0
  for (let i = 0; i < runs; i++) await runtime.runPromise(once)
  const per = (n: number) => (n / (runs * STEPS)).toFixed(1)
  let total = 0
  for (const [op, n] of [...counts].sort((a, b) => b[1] - a[1])) {
    total += n
    console.log(`${op.padEnd(22)} ${per(n)}`)
  }
  console.log(`ops/step ${per(total)}  fibers/step ${per(fibers)}`)
  await runtime.dispose()
}
void main()

/**
 * bench/loop/long.ts: CPU µs per step of the loop bench's tool loop at several lengths, in process,
 * on another tree's sources when asked — to compare a change before/after in one sitting (the
 * per-call prompt walks grow with the conversation, so a long loop shows them):
 * `BENCH_LOOP_ROOT=<worktree> node --conditions=@palyra/source --import tsx bench/loop/long.ts [runs=60] [steps=10,50]`
 * (defaults to this tree). Prints one line per length and, last, a JSON object.
 */
import { createRequire } from "node:module"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = process.env.BENCH_LOOP_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const req = createRequire(join(core, "package.json"))
const { Effect, ManagedRuntime, Schema } = (await import(req.resolve("effect"))) as typeof import("effect")
const Core = (await import(join(core, "src/index.ts"))) as typeof import("../../packages/core/src/index.js")
const Testing = (await import(join(core, "src/testing.ts"))) as typeof import("../../packages/core/src/testing.js")
const { Caller, Gateway, ScriptedModel, Tool } = Core

const runs = Number(process.argv[2] ?? 60)
const lengths = (process.argv[3] ?? "10,50").split(",").map(Number)

const add = Tool.make("math.add", {
  description: "Add two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  risk: "low",
  execute: ({ a, b }) => Effect.succeed(a + b)
})

const measure = async (steps: number) => {
  const model = ScriptedModel.make(
    (request) => {
      // Counted from the end back to the user message: the script's own walk stays O(1) per call.
      let results = 0
      for (const m of request.messages) if (m.role === "tool") results++
      return results < steps - 1
        ? { toolCalls: [{ name: "math.add", args: { a: results, b: 1 } }], usage: { inputTokens: 10, outputTokens: 5 } }
        : { text: "done", usage: { inputTokens: 10, outputTokens: 5 } }
    },
    { recordPrompts: false }
  )
  const runtime = ManagedRuntime.make(
    Testing.gatewayLayer({ model, tools: [add], budgets: { maxModelTurns: steps + 1, maxToolCalls: steps } })
  )
  const once = Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const { events } = yield* gateway.startRun(Caller.user("bench"), { text: "add up" })
    const seen = yield* Testing.collect(events)
    const last = seen.at(-1)
    if (last?._tag !== "RunStateChanged" || last.to !== "Done") throw new Error("run did not finish")
  })
  const n = Math.max(4, Math.round((runs * 10) / steps))
  for (let i = 0; i < Math.max(2, n / 5); i++) await runtime.runPromise(once as never)
  const c0 = process.cpuUsage()
  for (let i = 0; i < n; i++) await runtime.runPromise(once as never)
  const c = process.cpuUsage(c0)
  await runtime.dispose()
  return (c.user + c.system) / (n * steps)
}

const out: Record<string, number> = {}
for (const steps of lengths) {
  const us = await measure(steps)
  out[`cpuUsPerStep${steps}`] = Math.round(us * 10) / 10
  console.log(`${steps} steps: ${us.toFixed(1)} CPU µs/step`)
}
console.log(JSON.stringify({ bench: "loop-long", root, ...out }))

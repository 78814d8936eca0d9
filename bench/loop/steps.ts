/**
 * bench/loop/steps.ts: only Palyra's side of the 10-step tool loop (for profiling the loop's
 * per-step cost alone): `node --cpu-prof --conditions=@palyra/source --import tsx bench/loop/steps.ts [runs]`.
 */
import { Caller, Gateway, ScriptedModel, Tool } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime, Schema } from "effect"

const STEPS = 10
const runs = Number(process.argv[2] ?? 2000)
const add = Tool.make("math.add", {
  description: "Add two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  risk: "low",
  execute: ({ a, b }) => Effect.succeed(a + b)
})
const model = ScriptedModel.make(
  (request) => {
    const toolResults = request.messages.filter((m) => m.role === "tool").length
    return toolResults < STEPS - 1
      ? {
          toolCalls: [{ name: "math.add", args: { a: toolResults, b: 1 } }],
          usage: { inputTokens: 10, outputTokens: 5 }
        }
      : { text: "The sum is 9.", usage: { inputTokens: 10, outputTokens: 5 } }
  },
  { recordPrompts: false }
)
const runtime = ManagedRuntime.make(
  gatewayLayer({ model, tools: [add], budgets: { maxModelTurns: 50 } }) as Layer.Layer<Gateway.Gateway>
)
const once = Effect.gen(function* () {
  const gateway = yield* Gateway.Gateway
  const { events } = yield* gateway.startRun(Caller.user("bench"), { text: "add up" })
  const seen = yield* collect(events)
  if (seen.at(-1)?._tag !== "RunStateChanged") throw new Error("run did not finish")
})
const main = async () => {
  for (let i = 0; i < 100; i++) await runtime.runPromise(once)
  const c0 = process.cpuUsage()
  for (let i = 0; i < runs; i++) await runtime.runPromise(once)
  const c = process.cpuUsage(c0)
  console.log(`CPU µs/step: ${((c.user + c.system) / (runs * STEPS)).toFixed(1)}`)
  await runtime.dispose()
}
void main()

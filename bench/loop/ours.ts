/**
 * Palyra's side of the loop bench, shared by `index.ts` (against the AI SDK) and `steps.ts` (alone,
 * for profiling): a 10-step tool loop (9 `math.add` calls and a final answer) through the Gateway and
 * AgentLoop with a zero-latency scripted model and the in-memory journal.
 */
import { Caller, Gateway, ScriptedModel, Tool } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime, Schema } from "effect"

export const STEPS = 10

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

export const runtime = ManagedRuntime.make(
  gatewayLayer({ model, tools: [add], budgets: { maxModelTurns: 50 } }) as Layer.Layer<Gateway.Gateway>
)

/** One run of the loop to its end; the number of events it streamed. */
export const oursOnce = Effect.gen(function* () {
  const gateway = yield* Gateway.Gateway
  const { events } = yield* gateway.startRun(Caller.user("bench"), { text: "add up" })
  const seen = yield* collect(events)
  const last = seen.at(-1)
  if (last?._tag !== "RunStateChanged" || last.to !== "Done") throw new Error("run did not finish")
  return seen.length
})

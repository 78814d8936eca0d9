/**
 * Palyra's side of the loop bench, shared by `index.ts` (against the AI SDK) and `steps.ts` (alone,
 * for profiling): a 10-step tool loop (9 `math.add` calls and a final answer) through the Gateway and
 * AgentLoop with a zero-latency scripted model and the in-memory journal. `loopOf(steps)` builds the
 * same loop at another length (the 50-step row: the per-call prompt walks' quadratic term).
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

/** A `steps`-step loop: its runtime, and one run of it to its end (the number of events it streamed). */
export const loopOf = (steps: number) => {
  const model = ScriptedModel.make(
    (request) => {
      const toolResults = request.messages.filter((m) => m.role === "tool").length
      return toolResults < steps - 1
        ? {
            toolCalls: [{ name: "math.add", args: { a: toolResults, b: 1 } }],
            usage: { inputTokens: 10, outputTokens: 5 }
          }
        : { text: `The sum is ${steps - 1}.`, usage: { inputTokens: 10, outputTokens: 5 } }
    },
    { recordPrompts: false }
  )
  const runtime = ManagedRuntime.make(
    gatewayLayer({
      model,
      tools: [add],
      budgets: { maxModelTurns: Math.max(50, steps + 1) }
    }) as Layer.Layer<Gateway.Gateway>
  )
  const once = Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const { events } = yield* gateway.startRun(Caller.user("bench"), { text: "add up" })
    const seen = yield* collect(events)
    const last = seen.at(-1)
    if (last?._tag !== "RunStateChanged" || last.to !== "Done") throw new Error("run did not finish")
    return seen.length
  })
  return { runtime, once }
}

const ten = loopOf(STEPS)
export const runtime = ten.runtime

/** One run of the loop to its end; the number of events it streamed. */
export const oursOnce = ten.once

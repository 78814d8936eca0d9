/**
 * bench/loop/deltas: CPU per streamed model delta, in process (no transport), through the Gateway,
 * the agent loop, the tape and a subscriber. One run streams 2,000 deltas; the figure is the median
 * of 7 rounds of 5 runs. `node --conditions=@palyra/source --import tsx bench/loop/deltas.ts [chars]`:
 * `chars` is the loop's `coalesceChars` (1: every delta is appended; 64: most are only buffered).
 */
import { Caller, Gateway, ScriptedModel } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime } from "effect"

const DELTAS = 2000
const chars = Number(process.argv[2] ?? 1)
const model = ScriptedModel.make(() => ({ text: Array.from({ length: DELTAS }, (_, i) => `w${i} `) }), {
  recordPrompts: false
})
const runtime = ManagedRuntime.make(
  gatewayLayer({
    model,
    coalesceChars: chars,
    budgets: { maxEventsPerTurn: 1e6, maxTokensPerRun: 1e9, maxTokensPerSession: 1e12 }
  }) as Layer.Layer<Gateway.Gateway>
)
const once = Effect.gen(function* () {
  const gateway = yield* Gateway.Gateway
  const { events } = yield* gateway.startRun(Caller.user("bench"), { text: "go" })
  const seen = yield* collect(events)
  const last = seen.at(-1)
  if (last?._tag !== "RunStateChanged" || last.to !== "Done") throw new Error("run did not finish")
  return seen.length
})
for (let i = 0; i < 5; i++) await runtime.runPromise(once)
const samples: Array<number> = []
for (let r = 0; r < 7; r++) {
  const c0 = process.cpuUsage()
  for (let i = 0; i < 5; i++) await runtime.runPromise(once)
  const c = process.cpuUsage(c0)
  samples.push((c.user + c.system) / (5 * DELTAS))
}
samples.sort((a, b) => a - b)
console.log(JSON.stringify({ chars, cpuUsPerDeltaMedian: samples[3]!.toFixed(2), min: samples[0]!.toFixed(2) }))
await runtime.dispose()

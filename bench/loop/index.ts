/**
 * bench/loop: orchestration overhead per agent-loop step.
 *
 * Ours: a 10-step tool loop (9 tool calls + a final answer) through Palyra's Gateway and AgentLoop,
 * with a zero-latency scripted model and the in-memory journal, so every event is journaled
 * (hash-chained) and fanned out. Competitor, in the same process: the same 10-step loop through the
 * AI SDK's own `generateText` with its mock model (`MockLanguageModelV4`) and `isStepCount(10)`.
 *
 * Then the in-process CPU cost of a whole turn on the Gateway over the real SQLite journal and real
 * Cedar (`turn.ts`): `turnCpuUs` (a plain turn) and `toolTurnCpuUs` (a turn with one `time.now` call).
 */
import { generateText, isStepCount, tool } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { z } from "zod"
import { quick, result, round, table } from "../lib/report.js"
import { oursOnce, runtime, STEPS } from "./ours.js"
import { measureTurns } from "./turn.js"

const runs = quick ? 20 : 400
const warmup = quick ? 5 : 50

// ---- ours: ./ours.ts -------------------------------------------------------------------------

// ---- AI SDK ---------------------------------------------------------------------------------
const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined }
}
const aiModel = new MockLanguageModelV4({
  doGenerate: async (options) => {
    const toolResults = options.prompt.filter((m) => m.role === "tool").length
    return toolResults < STEPS - 1
      ? {
          content: [
            { type: "tool-call", toolCallId: `c${toolResults}`, toolName: "add", input: `{"a":${toolResults},"b":1}` }
          ],
          finishReason: { unified: "tool-calls", raw: undefined },
          usage,
          warnings: []
        }
      : {
          content: [{ type: "text", text: "The sum is 9." }],
          finishReason: { unified: "stop", raw: undefined },
          usage,
          warnings: []
        }
  }
})
const aiOnce = async () => {
  const r = await generateText({
    model: aiModel,
    tools: {
      add: tool({
        description: "Add two numbers",
        inputSchema: z.object({ a: z.number(), b: z.number() }),
        execute: async ({ a, b }) => a + b
      })
    },
    stopWhen: isStepCount(STEPS),
    prompt: "add up"
  })
  if (r.steps.length !== STEPS) throw new Error(`AI SDK ran ${r.steps.length} steps`)
}

// Wall µs and CPU µs (user + system of this process) per step: on a loaded machine the CPU figure
// is the one to compare (both loops are single-threaded and in this process).
const time = async (f: () => Promise<unknown>, n: number) => {
  const start = process.hrtime.bigint()
  const c0 = process.cpuUsage()
  for (let i = 0; i < n; i++) await f()
  const c = process.cpuUsage(c0)
  return {
    wall: Number(process.hrtime.bigint() - start) / 1e3 / (n * STEPS),
    cpu: (c.user + c.system) / (n * STEPS)
  }
}

const main = async () => {
  let events = 0
  const ours = () => runtime.runPromise(oursOnce).then((n) => (events = n))
  // Interleave warm-up and measurement rounds so both see the same machine state.
  await time(ours, warmup)
  await time(aiOnce, warmup)
  const oursUs: Array<number> = []
  const aiUs: Array<number> = []
  const oursCpu: Array<number> = []
  const aiCpu: Array<number> = []
  const rounds = 4
  for (let r = 0; r < rounds; r++) {
    const o = await time(ours, runs / rounds)
    const a = await time(aiOnce, runs / rounds)
    oursUs.push(o.wall)
    oursCpu.push(o.cpu)
    aiUs.push(a.wall)
    aiCpu.push(a.cpu)
  }
  await runtime.dispose()
  const median = (xs: Array<number>) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const stepOverheadUs = round(median(oursUs))
  const aiSdkStepUs = round(median(aiUs))
  const stepCpuUs = round(median(oursCpu))
  const aiSdkStepCpuUs = round(median(aiCpu))
  table(`bench/loop: ${STEPS}-step tool loop, ${runs} runs each (median of ${rounds} rounds)`, [
    {
      system: "Palyra (stream + policy + journal, in-memory)",
      "µs/step": stepOverheadUs,
      "CPU µs/step": stepCpuUs,
      "events/run": events
    },
    {
      system: "AI SDK generateText (mock model)",
      "µs/step": aiSdkStepUs,
      "CPU µs/step": aiSdkStepCpuUs,
      "events/run": "-"
    }
  ])
  console.log(
    `\nratio ours / AI SDK: ${round(stepOverheadUs / aiSdkStepUs)} wall, ${round(stepCpuUs / aiSdkStepCpuUs)} CPU (goal ≤ 2)`
  )
  const { turnCpuUs, toolTurnCpuUs } = await measureTurns(quick)
  table("in-process turn on the Gateway (SQLite journal, Cedar), CPU µs per turn (median of rounds)", [
    { turn: "plain (text answer)", "CPU µs": Math.round(turnCpuUs) },
    { turn: "one tool call (time.now, then text)", "CPU µs": Math.round(toolTurnCpuUs) }
  ])
  result("loop", {
    stepOverheadUs,
    aiSdkStepUs,
    ratio: round(stepOverheadUs / aiSdkStepUs),
    stepCpuUs,
    aiSdkStepCpuUs,
    cpuRatio: round(stepCpuUs / aiSdkStepCpuUs),
    turnCpuUs: Math.round(turnCpuUs),
    toolTurnCpuUs: Math.round(toolTurnCpuUs)
  })
}

await main()

/**
 * bench/loop: orchestration overhead per agent-loop step.
 *
 * Ours: a 10-step tool loop (9 tool calls + a final answer) through Palyra's Gateway and AgentLoop,
 * with a zero-latency scripted model and the in-memory journal, so every event is journaled
 * (hash-chained) and fanned out. Competitor, in the same process: the same 10-step loop through the
 * AI SDK's own `generateText` with its mock model (`MockLanguageModelV4`) and `isStepCount(10)`.
 *
 * The same loop at 50 steps on both sides (`stepOverheadUs50`, `ratio50`…): what grows with the
 * conversation per model call (the prompt's pairing and token estimate, the AI SDK's prompt
 * conversion) shows there.
 *
 * Then the in-process CPU cost of a whole turn on the Gateway over the real SQLite journal and real
 * Cedar (`turn.ts`): `turnCpuUs` (a plain turn) and `toolTurnCpuUs` (a turn with one `time.now` call).
 */
import { generateText, isStepCount, tool } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { z } from "zod"
import { quick, result, round, table } from "../lib/report.js"
import { loopOf, oursOnce, runtime, STEPS } from "./ours.js"
import { measureTurns } from "./turn.js"

const runs = quick ? 20 : 400
const warmup = quick ? 5 : 50

// ---- ours: ./ours.ts -------------------------------------------------------------------------

// ---- AI SDK ---------------------------------------------------------------------------------
const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined }
}
const aiModelOf = (steps: number) =>
  new MockLanguageModelV4({
    doGenerate: async (options) => {
      const toolResults = options.prompt.filter((m) => m.role === "tool").length
      return toolResults < steps - 1
        ? {
            content: [
              { type: "tool-call", toolCallId: `c${toolResults}`, toolName: "add", input: `{"a":${toolResults},"b":1}` }
            ],
            finishReason: { unified: "tool-calls", raw: undefined },
            usage,
            warnings: []
          }
        : {
            content: [{ type: "text", text: `The sum is ${steps - 1}.` }],
            finishReason: { unified: "stop", raw: undefined },
            usage,
            warnings: []
          }
    }
  })
const aiModel = aiModelOf(STEPS)
const aiOnce = () => aiLoop(aiModel, STEPS)
const aiLoop = async (model: MockLanguageModelV4, steps: number) => {
  const r = await generateText({
    model,
    tools: {
      add: tool({
        description: "Add two numbers",
        inputSchema: z.object({ a: z.number(), b: z.number() }),
        execute: async ({ a, b }) => a + b
      })
    },
    stopWhen: isStepCount(steps),
    prompt: "add up"
  })
  if (r.steps.length !== steps) throw new Error(`AI SDK ran ${r.steps.length} steps`)
}

/** The long loop (the per-call prompt walks grow with the conversation): both sides at this many steps. */
const LONG = 50

// Wall µs and CPU µs (user + system of this process) per step: on a loaded machine the CPU figure
// is the one to compare (both loops are single-threaded and in this process).
const time = async (f: () => Promise<unknown>, n: number, steps = STEPS) => {
  const start = process.hrtime.bigint()
  const c0 = process.cpuUsage()
  for (let i = 0; i < n; i++) await f()
  const c = process.cpuUsage(c0)
  return {
    wall: Number(process.hrtime.bigint() - start) / 1e3 / (n * steps),
    cpu: (c.user + c.system) / (n * steps)
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

  // The same loop at LONG steps, both sides, alternating rounds (runs / 5 each: the same step count).
  const long = loopOf(LONG)
  const oursLong = () => long.runtime.runPromise(long.once)
  const aiLongModel = aiModelOf(LONG)
  const aiLong = () => aiLoop(aiLongModel, LONG)
  const longRuns = Math.max(4, Math.round((runs * STEPS) / LONG))
  await time(oursLong, Math.max(1, Math.round(warmup / 5)), LONG)
  await time(aiLong, Math.max(1, Math.round(warmup / 5)), LONG)
  const longUs: Array<number> = []
  const longCpu: Array<number> = []
  const aiLongUs: Array<number> = []
  const aiLongCpu: Array<number> = []
  for (let r = 0; r < rounds; r++) {
    const o = await time(oursLong, Math.max(1, longRuns / rounds), LONG)
    const a = await time(aiLong, Math.max(1, longRuns / rounds), LONG)
    longUs.push(o.wall)
    longCpu.push(o.cpu)
    aiLongUs.push(a.wall)
    aiLongCpu.push(a.cpu)
  }
  await long.runtime.dispose()
  const stepOverheadUs50 = round(median(longUs))
  const aiSdkStepUs50 = round(median(aiLongUs))
  const stepCpuUs50 = round(median(longCpu))
  const aiSdkStepCpuUs50 = round(median(aiLongCpu))
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
    },
    {
      system: `Palyra, ${LONG}-step loop`,
      "µs/step": stepOverheadUs50,
      "CPU µs/step": stepCpuUs50,
      "events/run": "-"
    },
    {
      system: `AI SDK generateText, ${LONG}-step loop`,
      "µs/step": aiSdkStepUs50,
      "CPU µs/step": aiSdkStepCpuUs50,
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
    toolTurnCpuUs: Math.round(toolTurnCpuUs),
    stepOverheadUs50,
    aiSdkStepUs50,
    ratio50: round(stepOverheadUs50 / aiSdkStepUs50),
    stepCpuUs50,
    cpuRatio50: round(stepCpuUs50 / aiSdkStepCpuUs50)
  })
}

await main()

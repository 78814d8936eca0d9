/**
 * bench/loop/prompt-walks.ts: the prompt stage alone over a long tool loop — the default assembler
 * (`PromptAssembler.makeFromHistory`, its per-session memo) called once per model call as the loop
 * calls it, the history growing by one step (assistant message, tool call, result) between calls.
 * Reports µs of CPU per call at each length; on another tree's sources with `BENCH_LOOP_ROOT`:
 * `BENCH_LOOP_ROOT=<worktree> node --conditions=@palyra/source --import tsx bench/loop/prompt-walks.ts [steps=10,50,200] [rounds=400]`.
 */
import { createRequire } from "node:module"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = process.env.BENCH_LOOP_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const req = createRequire(join(core, "package.json"))
const { Effect } = (await import(req.resolve("effect"))) as typeof import("effect")
const Core = (await import(join(core, "src/index.ts"))) as typeof import("../../packages/core/src/index.js")
type TapeEvent = import("../../packages/core/src/index.js").TapeEvent.TapeEvent

const lengths = (process.argv[2] ?? "10,50,200").split(",").map(Number)
const rounds = Number(process.argv[3] ?? 400)
const session = Core.Records.makeSession({ id: "01KA0000000000000000000001" as never, principal: "bench" })
const tools = [
  { name: "math.add", description: "Add two numbers", parameters: { type: "object", properties: { a: {}, b: {} } } }
]

/** One loop's events, and where each model call's history ends (after the previous step's result). */
const loopEvents = (steps: number) => {
  const base = { sessionId: session.id, runId: "01KR0000000000000000000001", at: 0 }
  let seq = 0
  const ev = (e: Record<string, unknown>) => ({ ...base, tapeSeq: ++seq, ...e }) as unknown as TapeEvent
  const events: Array<TapeEvent> = [ev({ _tag: "UserMessage", text: "add up the numbers one by one" })]
  const calls: Array<number> = [events.length]
  for (let i = 0; i < steps - 1; i++) {
    events.push(ev({ _tag: "AssistantMessage", turn: i + 1, text: "", finishReason: "tool-calls" }))
    events.push(ev({ _tag: "ToolProposed", toolCallId: `c${i}`, tool: "math.add", args: { a: i, b: 1 } }))
    events.push(ev({ _tag: "ToolResult", toolCallId: `c${i}`, tool: "math.add", status: "ok", output: String(i + 1) }))
    calls.push(events.length)
  }
  return { events, calls }
}

const out: Record<string, number> = {}
for (const steps of lengths) {
  const { events, calls } = loopEvents(steps)
  const run = () => {
    const stage = Core.PromptAssembler.makeFromHistory()
    // The loop's history is one array that grows; each call sees it up to that point.
    const history: Array<TapeEvent> = []
    let tokens = 0
    for (const end of calls) {
      while (history.length < end) history.push(events[history.length]!)
      const assembled = Effect.runSync(
        stage.assemble({ session, runId: events[0]!.runId!, history, instructions: "be brief", tools })
      )
      tokens += assembled.estimatedTokens + assembled.request.messages.length
    }
    return tokens
  }
  const n = Math.max(20, Math.round((rounds * 50) / steps))
  for (let i = 0; i < n / 4; i++) run()
  const c0 = process.cpuUsage()
  for (let i = 0; i < n; i++) run()
  const c = process.cpuUsage(c0)
  const us = (c.user + c.system) / (n * steps)
  out[`usPerCall${steps}`] = Math.round(us * 100) / 100
  console.log(`${steps} model calls: ${us.toFixed(2)} CPU µs per call (prompt stage)`)
}
console.log(JSON.stringify({ bench: "prompt-walks", root, ...out }))

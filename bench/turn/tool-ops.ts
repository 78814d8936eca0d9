/**
 * bench/turn/tool-ops.ts: what the tool part of a turn costs in counts that do not move with the
 * machine's load — Effect operations (fiber run-loop steps), fibers begun, bytes allocated (V8's
 * sampling heap profiler, collected objects included) and CPU — for a plain turn and for a turn with
 * one `time.now` call (two model calls), through the promise API (`createPalyra`) over a real SQLite
 * journal, real Cedar (the default policies) and the AI SDK adapter over a mock `LanguageModelV4`
 * (a tool call when the last message is the user's, else one text delta). The difference is the
 * tool part: the second model call, the policy decision, the tool and their appends.
 * `BENCH_OPS_ROOT=<worktree>` runs another tree's sources (before/after in one sitting):
 * `node --conditions=@palyra/source --import tsx bench/turn/tool-ops.ts [turns=300]`.
 * Not in `pnpm bench --all` (no `index.ts`).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { instrumentEffect, replay } from "../lib/effectOps.js"

const root = process.env.BENCH_OPS_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const req = createRequire(join(core, "package.json"))
const { createPalyra, modelAdapter, toolAdapter } = (await import(
  join(core, "src/index.ts")
)) as typeof import("../../packages/core/src/index.js")
const { sqliteJournal } = (await import(
  join(root, "packages/journal/src/index.ts")
)) as typeof import("../../packages/journal/src/index.js")
const { AiSdkModel } = (await import(join(core, "src/ai-sdk.ts"))) as typeof import("../../packages/core/src/ai-sdk.js")
const { CedarPolicy } = (await import(join(core, "src/cedar.ts"))) as typeof import("../../packages/core/src/cedar.js")
const { BuiltinTools } = (await import(join(core, "src/tools.ts"))) as typeof import("../../packages/core/src/tools.js")
const { MockLanguageModelV4 } = (await import(req.resolve("ai/test"))) as typeof import("ai/test")
const turns = Number(process.argv[2] ?? 300)

// The daemon's model path: the AI SDK adapter (`doStream`) over a model that calls `time.now` when
// the last message is the user's asking the time, and otherwise answers with one text delta.
const finish = {
  type: "finish",
  finishReason: { unified: "stop", raw: "stop" },
  usage: {
    inputTokens: { total: 12, noCache: 12, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: 6, text: 6, reasoning: undefined }
  }
}
const text = [
  { type: "stream-start", warnings: [] },
  { type: "text-start", id: "t" },
  { type: "text-delta", id: "t", delta: "Sure: it is noon." },
  { type: "text-end", id: "t" },
  finish
]
const call = [
  { type: "stream-start", warnings: [] },
  { type: "tool-call", toolCallId: "call-1", toolName: "time.now", input: "{}" },
  { ...finish, finishReason: { unified: "tool-calls", raw: "tool_calls" } }
]
const model = modelAdapter(
  AiSdkModel.make(
    new MockLanguageModelV4({
      doStream: async ({ prompt }) => {
        const last = prompt.at(-1)
        const parts = last?.role === "user" && JSON.stringify(last.content).includes("time") ? call : text
        return replay(parts)
      }
    })
  )
)

const counts = await instrumentEffect(req, process.env.BENCH_OPS_BY === "1")

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-ops-"))
const palyra = createPalyra({
  model,
  journal: sqliteJournal({ filename: join(dir, "journal.db") }),
  memory: {},
  learning: true,
  tasks: { pollInterval: "1 second" },
  tools: [toolAdapter(BuiltinTools.timeTool)],
  policy: CedarPolicy.adapter()
})
// Ten sessions in turn (their history grows as a daemon's does); warm up first (both kinds).
const turn = (i: number, tool: boolean) =>
  palyra.run(tool ? `What time is it? (${i})` : `Hello (${i})`, {
    principal: "bench",
    sessionKey: `${tool ? "t" : "p"}${i % 10}`
  })
for (let i = 0; i < 100; i++) {
  await turn(i, false)
  await turn(i, true)
}

const session = new Session()
session.connect()
// One kind at a time: its operations, fibers, bytes and CPU per turn.
const measure = async (tool: boolean) => {
  await session.post("HeapProfiler.startSampling", {
    samplingInterval: 512,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true
  })
  counts.start()
  const cpu0 = process.cpuUsage()
  for (let i = 0; i < turns; i++) {
    const result = await turn(100 + i, tool)
    if (tool && !result.events.some((e) => e._tag === "ToolResult")) throw new Error("the tool turn ran no tool")
  }
  const cpu = process.cpuUsage(cpu0)
  counts.stop()
  const { profile } = await session.post("HeapProfiler.stopSampling")
  let bytes = 0
  const walk = (n: { selfSize: number; children?: Array<unknown> }) => {
    bytes += n.selfSize
    for (const c of n.children ?? []) walk(c as typeof n)
  }
  walk(profile.head as unknown as { selfSize: number; children?: Array<unknown> })
  const top =
    counts.by === undefined
      ? []
      : [...counts.by].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.BENCH_OPS_TOP ?? 40))
  return {
    opsPerTurn: Math.round(counts.ops / turns),
    fibersPerTurn: Number((counts.fibers / turns).toFixed(1)),
    kbAllocatedPerTurn: Math.round(bytes / turns / 1024),
    cpuUsPerTurn: Math.round((cpu.user + cpu.system) / turns),
    top
  }
}
const plain = await measure(false)
const tool = await measure(true)
await palyra.close()
rmSync(dir, { recursive: true, force: true })

console.log(`root ${root}`)
for (const [name, f] of [
  ["plain turn", plain],
  ["tool turn", tool]
] as const) {
  console.log(
    `per ${name}: ${f.opsPerTurn} Effect ops, ${f.fibersPerTurn} fibers, ${f.kbAllocatedPerTurn} KB allocated, ${f.cpuUsPerTurn} µs CPU (counting on)`
  )
  for (const [k, n] of f.top) console.log(`${(n / turns).toFixed(1).padStart(6)}  ${k}`)
}
console.log(
  JSON.stringify({
    bench: "turn-tool-ops",
    turns,
    opsPerTurn: plain.opsPerTurn,
    fibersPerTurn: plain.fibersPerTurn,
    kbAllocatedPerTurn: plain.kbAllocatedPerTurn,
    cpuUsPerTurn: plain.cpuUsPerTurn,
    toolOpsPerTurn: tool.opsPerTurn,
    toolFibersPerTurn: tool.fibersPerTurn,
    toolKbAllocatedPerTurn: tool.kbAllocatedPerTurn,
    toolCpuUsPerTurn: tool.cpuUsPerTurn,
    toolExtraOps: tool.opsPerTurn - plain.opsPerTurn,
    toolExtraCpuUs: tool.cpuUsPerTurn - plain.cpuUsPerTurn
  })
)

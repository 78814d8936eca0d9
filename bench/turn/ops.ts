/**
 * bench/turn/ops.ts: what one plain turn costs in counts, which do not move with the machine's load —
 * Effect operations (fiber run-loop steps, by opcode), fibers begun, and bytes allocated (V8's
 * sampling heap profiler at a 512-byte interval, collected objects included) — through the promise
 * API (`createPalyra`: Gateway, loop, scheduler, after-run hooks) over a real SQLite journal, with
 * the daemon's after-run defaults (memory injected, deterministic learning on) and the daemon's model
 * path (the AI SDK adapter over a mock `LanguageModelV4` answering with one text delta). `BENCH_OPS_ROOT=<worktree>` runs another tree's sources (before/after in
 * one sitting): `node --conditions=@palyra/source --import tsx bench/turn/ops.ts [turns=400]`.
 * Not in `pnpm bench --all` (no `index.ts`).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { instrumentEffect, replay } from "../lib/effectOps.js"

const root = process.env.BENCH_OPS_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const req = createRequire(join(core, "package.json"))
const { createPalyra, modelAdapter, scriptedModel } = (await import(
  join(core, "src/index.ts")
)) as typeof import("../../packages/core/src/index.js")
const { sqliteJournal } = (await import(
  join(root, "packages/journal/src/index.ts")
)) as typeof import("../../packages/journal/src/index.js")
const { AiSdkModel } = (await import(join(core, "src/ai-sdk.ts"))) as typeof import("../../packages/core/src/ai-sdk.js")
const { MockLanguageModelV4 } = (await import(req.resolve("ai/test"))) as typeof import("ai/test")
const turns = Number(process.argv[2] ?? 400)

// The daemon's model path: the AI SDK adapter (`doStream`, the plain sink) over a model whose stream
// holds one text delta, usage and the finish (BENCH_OPS_MODEL=scripted: core's scripted model).
const parts = [
  { type: "stream-start", warnings: [] },
  { type: "text-start", id: "t" },
  { type: "text-delta", id: "t", delta: "Sure: the answer is 42." },
  { type: "text-end", id: "t" },
  {
    type: "finish",
    finishReason: { unified: "stop", raw: "stop" },
    usage: {
      inputTokens: { total: 12, noCache: 12, cacheRead: undefined, cacheWrite: undefined },
      outputTokens: { total: 6, text: 6, reasoning: undefined }
    }
  }
]
const model =
  process.env.BENCH_OPS_MODEL === "scripted"
    ? scriptedModel(() => ({ text: "Sure: the answer is 42.", usage: { inputTokens: 12, outputTokens: 6 } }))
    : modelAdapter(
        AiSdkModel.make(
          new MockLanguageModelV4({
            doStream: async () => replay(parts)
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
  tasks: { pollInterval: "1 second" }
})
// Ten sessions in turn (their history grows as a daemon's does); warm up first.
const turn = (i: number) =>
  palyra.run(`What is six times seven? (${i})`, { principal: "bench", sessionKey: `s${i % 10}` })
for (let i = 0; i < 100; i++) await turn(i)

const session = new Session()
session.connect()
await session.post("HeapProfiler.startSampling", {
  samplingInterval: 512,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true
})
counts.start()
const cpu0 = process.cpuUsage()
for (let i = 0; i < turns; i++) await turn(100 + i)
const cpu = process.cpuUsage(cpu0)
counts.stop()
const { profile } = await session.post("HeapProfiler.stopSampling")
// BENCH_OPS_PROFILE=<file>: the sampled allocations of the counted turns (creation stacks: who built what).
if (process.env.BENCH_OPS_PROFILE) writeFileSync(process.env.BENCH_OPS_PROFILE, JSON.stringify(profile))
let bytes = 0
const walk = (n: { selfSize: number; children?: Array<unknown> }) => {
  bytes += n.selfSize
  for (const c of n.children ?? []) walk(c as typeof n)
}
walk(profile.head as unknown as { selfSize: number; children?: Array<unknown> })
await palyra.close()
rmSync(dir, { recursive: true, force: true })

const figures = {
  opsPerTurn: Math.round(counts.ops / turns),
  fibersPerTurn: Number((counts.fibers / turns).toFixed(1)),
  kbAllocatedPerTurn: Math.round(bytes / turns / 1024),
  cpuUsPerTurn: Math.round((cpu.user + cpu.system) / turns)
}
console.log(`root ${root}`)
console.log(
  `per plain turn: ${figures.opsPerTurn} Effect ops, ${figures.fibersPerTurn} fibers, ${figures.kbAllocatedPerTurn} KB allocated, ${figures.cpuUsPerTurn} µs CPU (counting on)`
)
if (counts.by !== undefined) {
  for (const [k, n] of [...counts.by].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.BENCH_OPS_TOP ?? 60)))
    console.log(`${(n / turns).toFixed(1).padStart(6)}  ${k}`)
}
console.log(JSON.stringify({ bench: "turn-ops", turns, ...figures }))

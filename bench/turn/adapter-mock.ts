/**
 * bench/turn/adapter-mock.ts: the AI SDK adapter's own CPU per model call, without the network or
 * the provider's parsing: an AI SDK `MockLanguageModelV4` whose stream holds every part at once,
 * driven like the agent loop does (`runIntoNow`, deltas buffered, a write every 16).
 * `BENCH_ADAPTER_ROOT=<worktree> node --conditions=@palyra/source --import tsx bench/turn/adapter-mock.ts [deltas=64] [calls=3000]`
 * (defaults to this tree).
 */
import { createRequire } from "node:module"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = process.env.BENCH_ADAPTER_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const req = createRequire(join(core, "package.json"))
const { Effect } = (await import(req.resolve("effect"))) as typeof import("effect")
const { MockLanguageModelV4 } = (await import(req.resolve("ai/test"))) as typeof import("ai/test")
const { AiSdkModel } = (await import(join(core, "src/ai-sdk.ts"))) as typeof import("../../packages/core/src/ai-sdk.js")
const { ModelProvider } = (await import(
  join(core, "src/index.ts")
)) as typeof import("../../packages/core/src/index.js")
const deltas = Number(process.argv[2] ?? 64)
const calls = Number(process.argv[3] ?? 3000)
const parts = [
  { type: "stream-start", warnings: [] },
  { type: "text-start", id: "t" },
  ...Array.from({ length: deltas }, (_, i) => ({ type: "text-delta", id: "t", delta: `w${i} ` })),
  { type: "text-end", id: "t" },
  {
    type: "finish",
    finishReason: { unified: "stop", raw: "stop" },
    usage: {
      inputTokens: { total: 3, noCache: 3, cacheRead: undefined, cacheWrite: undefined },
      outputTokens: { total: 5, text: 5, reasoning: undefined }
    }
  }
]
const model = AiSdkModel.make(
  new MockLanguageModelV4({
    doStream: async () => ({
      stream: new ReadableStream({
        start(c) {
          for (const p of parts) c.enqueue(p as never)
          c.close()
        }
      })
    })
  })
)
const request = { messages: [{ role: "user" as const, text: "hi" }], tools: [] }
let text = 0
const write = Effect.sync(() => {})
const sink = (e: { readonly type: string }) =>
  e.type !== "text-delta" ? undefined : ++text % 16 === 0 ? write : undefined
const call = ModelProvider.runIntoNow(model, request, sink)
for (let i = 0; i < 300; i++) await Effect.runPromise(call)
const c0 = process.cpuUsage()
for (let i = 0; i < calls; i++) await Effect.runPromise(call)
const c = process.cpuUsage(c0)
console.log(
  JSON.stringify({
    bench: "turn-adapter-mock",
    cpuUsPerCall: Math.round(((c.user + c.system) / calls) * 10) / 10,
    deltas,
    now: model.streamToNow !== undefined
  })
)

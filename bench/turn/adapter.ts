/**
 * bench/turn/adapter.ts: the AI SDK adapter's main-thread cost per model call, in process — what a
 * daemon turn pays for its model call(s) outside the network. The model is `Models.fromSpec`
 * (`openai-compatible:`, the daemon's own provider and `fetch`) against a local OpenAI
 * chat-completions server answering at once; the sink is the agent loop's kind (`runIntoNow`:
 * deltas buffered, one flush per `flushEvery` deltas returning a write).
 *
 * `node --conditions=@palyra/source --import tsx bench/turn/adapter.ts [deltas=1] [calls=3000]`;
 * `BENCH_ADAPTER_ROOT=<another worktree>` runs that tree's core sources (before/after in one sitting).
 * Last line: `{"bench":"turn-adapter","cpuUsPerCall":…,"deltas":…}`.
 */
import { createServer } from "node:http"
import { createRequire } from "node:module"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = process.env.BENCH_ADAPTER_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const { Effect } = (await import(
  createRequire(join(core, "package.json")).resolve("effect")
)) as typeof import("effect")
const { Models } = (await import(join(core, "src/models.ts"))) as typeof import("../../packages/core/src/models.js")
const { ModelProvider } = (await import(
  join(core, "src/index.ts")
)) as typeof import("../../packages/core/src/index.js")

const deltas = Number(process.argv[2] ?? 1)
const calls = Number(process.argv[3] ?? 3000)
const flushEvery = 16

const frame = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const answer = [
  frame({ role: "assistant", content: "" }),
  ...Array.from({ length: deltas }, (_, i) => frame({ content: `word${i} ` })),
  frame({}, "stop"),
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [], usage: { prompt_tokens: 20, completion_tokens: deltas, total_tokens: 20 + deltas } })}\n\n`,
  "data: [DONE]\n\n"
].join("")
const server = createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    res.end(answer)
  })
})
await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`

const model = await Effect.runPromise(Models.fromSpec(`openai-compatible:${url}#bench`, {}))
const request = { messages: [{ role: "user" as const, text: "hi" }], tools: [] }
let text = 0
let writes = 0
const write = Effect.sync(() => void writes++)
const sink = (event: { readonly type: string }) => {
  if (event.type !== "text-delta") return undefined
  return ++text % flushEvery === 0 ? write : undefined
}
const call = ModelProvider.runIntoNow(model, request, sink)

for (let i = 0; i < 300; i++) await Effect.runPromise(call)
const cpu0 = process.cpuUsage()
const t0 = performance.now()
for (let i = 0; i < calls; i++) await Effect.runPromise(call)
const cpu = process.cpuUsage(cpu0)
const wall = performance.now() - t0
server.close()
// The process's CPU includes the local server's share (the same in both trees).
const cpuUsPerCall = Math.round(((cpu.user + cpu.system) / calls) * 10) / 10
console.log(`${calls} calls × ${deltas} deltas: ${cpuUsPerCall} µs CPU/call, ${(wall / calls).toFixed(3)} ms wall/call`)
console.log(
  JSON.stringify({
    bench: "turn-adapter",
    cpuUsPerCall,
    deltas,
    calls,
    writes,
    hasStreamToNow: model.streamToNow !== undefined
  })
)

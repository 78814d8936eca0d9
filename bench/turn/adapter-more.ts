/**
 * bench/turn/adapter-more.ts: what the AI SDK adapter's `more` (one event of look-ahead) buys and
 * costs, in process. The model is `Models.fromSpec` (`openai-compatible:`, the daemon's own provider
 * and `fetch`) against a local OpenAI chat-completions server; the sink is the agent loop's kind: it
 * holds a delta while the provider says `more` and returns one write (an "append") for what it
 * holds on the first call without it.
 *
 * - `burst`: the server writes all N deltas (and the tail) in one socket write — a fast model, or a
 *   loaded daemon reading late: with `more` the N deltas are one append.
 * - `paced`: the server writes each next delta only once the sink has the previous one (one delta
 *   per socket read): the look-ahead's cost where it cannot join anything.
 *
 * `node --conditions=@palyra/source --import tsx bench/turn/adapter-more.ts [burst|paced] [deltas=32] [calls=1000]`;
 * `BENCH_ADAPTER_ROOT=<another worktree>` runs that tree's core sources (before/after in one
 * sitting, e.g. /work/wt/base11 — without `more` in the adapter). The process's CPU includes the
 * local server's share (the same in both trees).
 * Last line: `{"bench":"turn-adapter-more","mode":…,"cpuUsPerDelta":…,"cpuUsPerCall":…,"appendsPerCall":…}`.
 */
import { createServer, type ServerResponse } from "node:http"
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

const mode = process.argv[2] === "paced" ? "paced" : "burst"
const deltas = Number(process.argv[3] ?? 32)
const calls = Number(process.argv[4] ?? 1000)

const frame = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const writes = Array.from(
  { length: deltas },
  (_, i) => (i === 0 ? frame({ role: "assistant", content: "" }) : "") + frame({ content: `word${i} ` })
)
const tail = [
  frame({}, "stop"),
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [], usage: { prompt_tokens: 20, completion_tokens: deltas, total_tokens: 20 + deltas } })}\n\n`,
  "data: [DONE]\n\n"
].join("")
const whole = writes.join("") + tail

// Paced: the response being written and the writes still to come (the sink calls `advance`).
let current: ServerResponse | undefined
let waiting: Array<string> = []
const advance = () => {
  const next = waiting.shift()
  if (current === undefined || next === undefined) return
  if (waiting.length === 0) current.end(next)
  else current.write(next)
}
const server = createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    if (mode === "burst") return void res.end(whole)
    current = res
    waiting = [...writes, tail]
    advance()
  })
})
await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`

const model = await Effect.runPromise(Models.fromSpec(`openai-compatible:${url}#bench`, {}))
const request = { messages: [{ role: "user" as const, text: "hi" }], tools: [] }
let appends = 0
let held = 0
let seen = 0
let withMore = 0
const write = Effect.sync(() => {
  appends++
  held = 0
})
// The loop's kind of sink: hold deltas while `more`; one write for what is held on a call without
// it (and one for the finish: the answer's own append).
const sink = (event: { readonly type: string }, more?: boolean) => {
  if (event.type === "text-delta") {
    seen++
    held++
    if (more === true) withMore++
    if (mode === "paced") advance()
  }
  return more === true || (held === 0 && event.type !== "finish") ? undefined : write
}
const call = ModelProvider.runIntoNow(model, request, sink)

for (let i = 0; i < 200; i++) await Effect.runPromise(call)
appends = 0
seen = 0
withMore = 0
const cpu0 = process.cpuUsage()
const t0 = performance.now()
for (let i = 0; i < calls; i++) await Effect.runPromise(call)
const cpu = process.cpuUsage(cpu0)
const wall = performance.now() - t0
server.close()
if (seen !== calls * deltas || held !== 0) throw new Error(`saw ${seen} deltas (${calls * deltas} sent), ${held} held`)
console.log(
  `user/sys µs/delta ${(cpu.user / (calls * deltas)).toFixed(1)} / ${(cpu.system / (calls * deltas)).toFixed(1)}`
)
const cpuUs = cpu.user + cpu.system
const cpuUsPerCall = Math.round((cpuUs / calls) * 10) / 10
const cpuUsPerDelta = Math.round((cpuUs / (calls * deltas)) * 100) / 100
const appendsPerCall = Math.round((appends / calls) * 100) / 100
const moreShare = Math.round((withMore / seen) * 1000) / 1000
console.log(`mode          ${mode}`)
console.log(`calls×deltas  ${calls} × ${deltas}`)
console.log(`CPU µs/call   ${cpuUsPerCall}`)
console.log(`CPU µs/delta  ${cpuUsPerDelta}`)
console.log(`appends/call  ${appendsPerCall}`)
console.log(`deltas w/more ${moreShare}`)
console.log(`wall ms/call  ${(wall / calls).toFixed(3)}`)
console.log(
  JSON.stringify({
    bench: "turn-adapter-more",
    mode,
    deltas,
    calls,
    cpuUsPerCall,
    cpuUsPerDelta,
    appendsPerCall,
    moreShare,
    root
  })
)

/**
 * bench/turn/burst.ts: the daemon's CPU per streamed delta when the model sends its answer's N
 * deltas in one socket write (a fast model, or a daemon that reads late under load) — what the AI
 * SDK adapter's `more` joins into one tape append. palyrad is spawned with a local OpenAI
 * chat-completions server as its model and driven over HTTP (`POST /v1/runs?stream=true`, SSE);
 * the figure is the daemon's CPU (all threads, /proc) over the measured turns, per delta.
 *
 * `node --import tsx bench/turn/burst.ts [deltas=64] [turns=200]`; `BENCH_TURN_BIN=<palyrad.js>`
 * runs another build (before/after in one sitting, e.g. /work/wt/base11/packages/daemon/dist/bin/palyrad.js).
 * Last line: `{"bench":"turn-burst","cpuUsPerDelta":…,"cpuMsPerTurn":…,"deltas":…}`.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { gcFlags, shebangFlags } from "../lib/report.js"

const here = dirname(fileURLToPath(import.meta.url))
const bin = process.env.BENCH_TURN_BIN ?? join(here, "..", "..", "packages/daemon/dist/bin/palyrad.js")
const deltas = Number(process.argv[2] ?? 64)
const turns = Number(process.argv[3] ?? 200)

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const answer = [
  chunk({ role: "assistant", content: "" }),
  ...Array.from({ length: deltas }, (_, i) => chunk({ content: `word${i} ` })),
  chunk({}, "stop"),
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [], usage: { prompt_tokens: 20, completion_tokens: deltas, total_tokens: 20 + deltas } })}\n\n`,
  "data: [DONE]\n\n"
].join("")
const model = createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    res.end(answer)
  })
})
await new Promise<void>((r) => model.listen(0, "127.0.0.1", () => r()))
const modelUrl = `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-burst-"))
// The daemon coalesces deltas to ~48 characters per tape event (`coalesceChars`): N deltas of 7 are
// ~N/7 events, one append each without `more`, one for the whole burst with it.
writeFileSync(join(dir, "palyra.toml"), `model = "openai-compatible:${modelUrl}#bench"\n`)
const daemon = spawn(process.execPath, [...shebangFlags(bin), ...gcFlags, bin, "--port", "0", "--log-format", "json"], {
  cwd: dir,
  stdio: ["ignore", "ignore", "pipe"],
  env: { ...process.env, PALYRA_LOG_LEVEL: "warning", PALYRA_GRPC_PORT: "0" }
})
const url = await new Promise<string>((resolve, reject) => {
  let err = ""
  daemon.stderr!.on("data", (d) => {
    err += d
    const m = /listening on (http:\/\/\S+)/.exec(err)
    if (m) resolve(m[1]!)
  })
  daemon.on("exit", (code) => reject(new Error(`palyrad exited ${code}: ${err}`)))
})
const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
const cpuMs = (child: ChildProcess) => {
  const fields = readFileSync(`/proc/${child.pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
}

/** One turn: the number of `AssistantDelta` frames the client saw before the run's end. */
const turn = async (sessionKey: string): Promise<number> => {
  const response = await fetch(`${url}/v1/runs?stream=true`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ text: "go", sessionKey }),
    signal: AbortSignal.timeout(15_000)
  })
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`)
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  let seen = 0
  while (true) {
    const { done, value } = await reader.read()
    if (done) throw new Error("stream ended before the run did")
    buffer += decoder.decode(value, { stream: true })
    let cut = buffer.indexOf("\n\n")
    while (cut >= 0) {
      const frame = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      cut = buffer.indexOf("\n\n")
      const data = /^data: (.*)$/m.exec(frame)?.[1]
      if (data === undefined) continue
      const event = JSON.parse(data) as { _tag: string; to?: string }
      if (event._tag === "AssistantDelta") seen++
      if (event._tag !== "RunStateChanged" || !["Done", "Failed", "Cancelled"].includes(event.to ?? "")) continue
      await reader.cancel()
      if (event.to !== "Done") throw new Error(`run ended ${event.to}`)
      return seen
    }
  }
}

for (let i = 0; i < 20; i++) await turn(`warm-${i % 4}`)
const cpu0 = cpuMs(daemon)
const t0 = performance.now()
let streamed = 0
// Ten sessions, one turn at a time (a session's history grows by one answer per turn).
for (let i = 0; i < turns; i++) streamed += await turn(`s-${i % 10}`)
const wall = performance.now() - t0
const cpu = cpuMs(daemon) - cpu0
await new Promise<void>((r) => {
  daemon.on("exit", () => r())
  daemon.kill("SIGTERM")
})
model.close()
rmSync(dir, { recursive: true, force: true })

const cpuMsPerTurn = Math.round((cpu / turns) * 100) / 100
const cpuUsPerDelta = Math.round(((cpu * 1000) / (turns * deltas)) * 10) / 10
console.log(`turns × deltas  ${turns} × ${deltas} (${streamed} delta frames seen)`)
console.log(`daemon CPU      ${cpuMsPerTurn} ms/turn, ${cpuUsPerDelta} µs/delta`)
console.log(`wall            ${(wall / turns).toFixed(2)} ms/turn`)
console.log(JSON.stringify({ bench: "turn-burst", cpuUsPerDelta, cpuMsPerTurn, deltas, turns, bin }))

#!/usr/bin/env node
// What one plain daemon turn does, counted (not timed): `node bench/turn/counts.mjs [palyrad.js] [turns=200]`.
// The built palyrad (default: this tree's) with `counts-preload.mjs`, a local chat-completions server
// answering at once (the `bench turn` answer), and `POST /v1/runs?stream=true` turns over 10 keyed
// sessions after 30 warm-up turns; prints the per-turn difference of every count, and the SSE bytes and
// frames the client read. Not in `pnpm bench --all` (no `index.ts`); counting slows the daemon.
import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const bin = resolve(process.argv[2] ?? join(here, "../../packages/daemon/dist/bin/palyrad.js"))
const turns = Number(process.argv[3] ?? 200)

const chunk = (delta, finish = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const usage = `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [], usage: { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 } })}\n\n`
const model = createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    res.write(chunk({ role: "assistant", content: "" }))
    res.write(chunk({ content: "Hello from " }))
    res.write(chunk({ content: "the bench model." }))
    res.write(chunk({}, "stop"))
    res.end(`${usage}data: [DONE]\n\n`)
  })
})
await new Promise((r) => model.listen(0, "127.0.0.1", r))

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-counts-"))
writeFileSync(
  join(dir, "palyra.toml"),
  `model = "openai-compatible:http://127.0.0.1:${model.address().port}/v1#bench"\n`
)
const out = join(dir, "counts.json")
const daemon = spawn(process.execPath, ["--import", join(here, "counts-preload.mjs"), bin, "--port", "0"], {
  cwd: dir,
  stdio: ["ignore", "ignore", "pipe"],
  env: { ...process.env, PALYRA_LOG_LEVEL: "warning", PALYRA_GRPC_PORT: "0", COUNTS_OUT: out }
})
const url = await new Promise((resolve, reject) => {
  let err = ""
  daemon.stderr.on("data", (d) => {
    err += d
    const m = /listening on (http:\/\/\S+)/.exec(err)
    if (m) resolve(m[1])
  })
  daemon.on("exit", (code) => reject(new Error(`palyrad exited ${code}: ${err}`)))
})
const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()

let sseBytes = 0
let sseFrames = 0
const turn = async (key) => {
  const response = await fetch(`${url}/v1/runs?stream=true`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ text: "hello", sessionKey: key })
  })
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let text = ""
  while (true) {
    const { done, value } = await reader.read()
    if (done) break
    text += decoder.decode(value, { stream: true })
    if (/"to":"(Done|Failed|Cancelled)"/.test(text)) {
      await reader.cancel()
      break
    }
  }
  sseBytes += Buffer.byteLength(text)
  sseFrames += text.split("\n\n").length - 1
}
const snapshot = async () => {
  daemon.kill("SIGWINCH")
  await new Promise((r) => setTimeout(r, 300))
  return JSON.parse(readFileSync(out, "utf8"))
}

for (let i = 0; i < 30; i++) await turn(`k-${i % 10}`)
const before = await snapshot()
sseBytes = 0
sseFrames = 0
for (let i = 0; i < turns; i++) await turn(`k-${i % 10}`)
const after = await snapshot()
const perTurn = {}
for (const key of Object.keys(after).sort()) {
  const n = (after[key] - (before[key] ?? 0)) / turns
  if (n > 0) perTurn[key] = Math.round(n * 100) / 100
}
console.log(`per plain turn (${turns} turns on 10 keyed sessions), ${bin}`)
for (const [key, n] of Object.entries(perTurn)) console.log(`${String(n).padStart(9)}  ${key}`)
console.log(`${String(sseBytes / turns).padStart(9)}  SSE bytes the client read`)
console.log(`${String(sseFrames / turns).padStart(9)}  SSE frames the client read`)
console.log(JSON.stringify({ bench: "turn-counts", turns, ...perTurn, sseBytes: sseBytes / turns }))
daemon.kill("SIGTERM")
await new Promise((r) => daemon.on("exit", r))
model.close()
rmSync(dir, { recursive: true, force: true })

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
import type { ChildProcess } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { chunk, cpuMsOf, listenModel, startPalyrad, streamTurn, usage } from "./harness.js"

const here = dirname(fileURLToPath(import.meta.url))
const bin = process.env.BENCH_TURN_BIN ?? join(here, "..", "..", "packages/daemon/dist/bin/palyrad.js")
const deltas = Number(process.argv[2] ?? 64)
const turns = Number(process.argv[3] ?? 200)

const answer = [
  chunk({ role: "assistant", content: "" }),
  ...Array.from({ length: deltas }, (_, i) => chunk({ content: `word${i} ` })),
  chunk({}, "stop"),
  usage(deltas),
  "data: [DONE]\n\n"
].join("")
const model = createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    res.end(answer)
  })
})
const modelUrl = await listenModel(model)

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-burst-"))
// The daemon coalesces deltas to ~48 characters per tape event (`coalesceChars`): N deltas of 7 are
// ~N/7 events, one append each without `more`, one for the whole burst with it.
const { daemon, url, token } = await startPalyrad({ bin, dir, modelUrl })
const cpuMs = (child: ChildProcess) => cpuMsOf(child.pid!)

/** One turn: the number of `AssistantDelta` frames the client saw before the run's end. */
const turn = async (sessionKey: string): Promise<number> => {
  let seen = 0
  await streamTurn(url, token, "go", sessionKey, (event) => {
    if (event._tag === "AssistantDelta") seen++
  })
  return seen
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

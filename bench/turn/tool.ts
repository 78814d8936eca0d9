/**
 * bench/turn/tool.ts: what the tool part of a turn costs in the daemon. palyrad is spawned with a
 * local OpenAI chat-completions server as its model (as `bench turn` does: a `time.now` call when
 * the user asks "what time", then text) and driven over HTTP (`POST /v1/runs?stream=true`, SSE),
 * alternating blocks of plain turns and one-tool turns in the same sessions' kind, so the two are
 * measured under the same load. Figures: each kind's p50 and the daemon's CPU (all threads, /proc)
 * per turn; `toolExtraCpuMs` is a tool turn's CPU beyond a plain turn's (its second model call, the
 * policy decision, the tool and their appends).
 *
 * `node --import tsx bench/turn/tool.ts [turns=300]`; `BENCH_TURN_BIN=<palyrad.js>` runs another
 * build (before/after in one sitting); `BENCH_CPU_PROF=<dir>` profiles the daemon during tool turns
 * only with `BENCH_TOOL_ONLY=1` (no plain turns at all; `BENCH_PLAIN_ONLY=1`: plain turns only, to diff against).
 * Last line: `{"bench":"turn-tool","toolTurnP50Ms":…,"toolCpuMsPerTurn":…,"plainCpuMsPerTurn":…,…}`.
 */
import type { ChildProcess } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { percentile } from "../lib/report.js"
import { benchModel, cpuMsOf, listenModel, startPalyrad, streamTurn } from "./harness.js"

const here = dirname(fileURLToPath(import.meta.url))
const bin = process.env.BENCH_TURN_BIN ?? join(here, "..", "..", "packages/daemon/dist/bin/palyrad.js")
const turns = Number(process.argv[2] ?? 300)
const toolOnly = process.env.BENCH_TOOL_ONLY === "1"
const plainOnly = process.env.BENCH_PLAIN_ONLY === "1"

// The same answers as `bench turn`'s model. Each request's arrival and answer (this process's clock,
// the client's too) and its size: where a tool turn's wall time goes between the two model calls.
const modelCalls: Array<{ arrived: number; answered: number; bytes: number }> = []
const model = benchModel((call) => modelCalls.push(call))
const modelUrl = await listenModel(model)

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-tool-"))
const profile = process.env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []
const { daemon, url, token } = await startPalyrad({ bin, dir, modelUrl, nodeFlags: profile })
const cpuMs = (child: ChildProcess) => cpuMsOf(child.pid!)

/** One turn (ms, `streamTurn`); a tool turn must have run exactly one tool, and successfully. */
const turn = async (text: string, sessionKey: string): Promise<number> => {
  let tools = 0
  const ms = await streamTurn(url, token, text, sessionKey, (event) => {
    if (event._tag === "ToolResult" && event.status === "ok") tools++
  })
  if (text.startsWith("what time") && tools !== 1) throw new Error(`a tool turn ran ${tools} tools`)
  return ms
}

// Warm-up: both kinds.
for (let i = 0; i < 20; i++) {
  await turn("hello", `warm-${i % 4}`)
  await turn("what time is it?", `warm-${i % 4}`)
}
// Blocks of 10 turns of one kind, alternating, ten sessions each (a session's history grows by one
// turn per block; fresh sessions every 15 blocks, so histories stay as long as in `bench turn`'s tool turns).
const kinds = toolOnly ? (["tool"] as const) : plainOnly ? (["plain"] as const) : (["plain", "tool"] as const)
const spent = { plain: { cpu: 0, n: 0, ms: [] as Array<number> }, tool: { cpu: 0, n: 0, ms: [] as Array<number> } }
// A tool turn's phases (ms): request → first model call arrives; its answer → the second arrives (the
// tool part: the answer parsed, the decision, the tool, the commit, the second prompt); the second's
// answer → the client has the run's end (the last commit and its delivery).
const phases = { first: [] as Array<number>, between: [] as Array<number>, last: [] as Array<number> }
const requestBytes: Array<number> = []
for (let done = 0; done < turns; ) {
  for (const kind of kinds) {
    const cpu0 = cpuMs(daemon)
    for (let i = 0; i < 10; i++) {
      const t0 = performance.now()
      const calls = modelCalls.length
      const ms = await turn(kind === "tool" ? "what time is it?" : "hello", `${kind}-${Math.floor(done / 150)}-${i}`)
      spent[kind].ms.push(ms)
      const [one, two] = modelCalls.slice(calls)
      if (kind === "tool" && one !== undefined && two !== undefined) {
        phases.first.push(one.arrived - t0)
        phases.between.push(two.arrived - one.answered)
        phases.last.push(t0 + ms - two.answered)
        requestBytes.push(one.bytes, two.bytes)
      }
    }
    spent[kind].cpu += cpuMs(daemon) - cpu0
    spent[kind].n += 10
  }
  done += 10
}
await new Promise<void>((r) => {
  daemon.on("exit", () => r())
  daemon.kill("SIGTERM")
})
model.close()
rmSync(dir, { recursive: true, force: true })

const r2 = (n: number) => Math.round(n * 100) / 100
const p50 = (xs: Array<number>) =>
  r2(
    percentile(
      [...xs].sort((a, b) => a - b),
      50
    )
  )
const toolCpuMsPerTurn = plainOnly ? 0 : r2(spent.tool.cpu / spent.tool.n)
const plainCpuMsPerTurn = toolOnly ? 0 : r2(spent.plain.cpu / spent.plain.n)
console.log(`tool turns   ${spent.tool.n}: p50 ${p50(spent.tool.ms)} ms, daemon CPU ${toolCpuMsPerTurn} ms/turn`)
if (!plainOnly)
  console.log(
    `tool turn phases (p50, ms): to the first model call ${p50(phases.first)}, between the calls ${p50(phases.between)}, after the second ${p50(phases.last)}; model request ${p50(requestBytes)} bytes`
  )
if (!toolOnly)
  console.log(`plain turns  ${spent.plain.n}: p50 ${p50(spent.plain.ms)} ms, daemon CPU ${plainCpuMsPerTurn} ms/turn`)
console.log(
  JSON.stringify({
    bench: "turn-tool",
    toolTurnP50Ms: p50(spent.tool.ms),
    toolCpuMsPerTurn,
    ...(plainOnly ? {} : { toolBetweenCallsP50Ms: p50(phases.between) }),
    ...(toolOnly
      ? {}
      : {
          plainTurnP50Ms: p50(spent.plain.ms),
          plainCpuMsPerTurn,
          toolExtraCpuMs: r2(toolCpuMsPerTurn - plainCpuMsPerTurn)
        }),
    turns,
    bin
  })
)

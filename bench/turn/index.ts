/**
 * bench/turn: what a user waits for, end to end. The built palyrad runs as a child process with a
 * real model provider (`openai-compatible:`) pointed at a local OpenAI chat-completions server that
 * answers instantly — so everything measured is Palyra's — and a client in another process drives
 * it over HTTP: `POST /v1/runs?stream=true` until the run's final `RunStateChanged`.
 *
 * Figures: a plain turn (p50/p99), a turn with one low-risk tool call (`time.now`: two model calls),
 * 20 concurrent sessions × 10 turns (turns/s), and the daemon's RSS after 200 one-message sessions
 * (after a forced full GC: the daemon runs with a bench-only `--expose-gc` preload).
 *
 * In the same run, the same client and model server drive two floors (`floor.ts`): a bare
 * `node:http` server calling the AI SDK provider palyrad uses (the stack's floor: no journal, no
 * policy, no sessions), and one calling the model with a raw `http.request` (the machine's floor).
 * The ratios to the stack's floor hold on a noisy machine where the absolute figures do not.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { collectGarbage, quick, result, round, table } from "../lib/report.js"
import { benchModel, cpuMsOf, listening, listenModel, startPalyrad } from "./harness.js"

const here = dirname(fileURLToPath(import.meta.url))
const root = join(here, "..", "..")
// BENCH_TURN_BIN: another build of palyrad (e.g. a copy of main's dist, for before/after in one sitting).
const bin = process.env.BENCH_TURN_BIN ?? join(root, "packages/daemon/dist/bin/palyrad.js")
if (!existsSync(bin)) {
  const built = spawnSync("pnpm", ["run", "build"], { cwd: root, stdio: "inherit" })
  if (built.status !== 0) process.exit(built.status ?? 1)
}

// ---- the model: an OpenAI chat-completions server that answers at once ------------------------
const model = benchModel()
// Connections the daemon's model client opened (a keep-alive client opens a handful, not one per call).
let modelConnections = 0
model.on("connection", () => modelConnections++)
const modelUrl = await listenModel(model)

// ---- the daemon --------------------------------------------------------------------------------
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-turn-"))
const profile = [
  ...(process.env.BENCH_CPU_PROF
    ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`]
    : process.env.BENCH_HEAP_PROF
      ? ["--heap-prof", `--heap-prof-dir=${process.env.BENCH_HEAP_PROF}`, "--heap-prof-interval=65536"]
      : process.env.BENCH_ALLOC_PROF
        ? // Everything allocated, collected objects included (see ../lib/alloc-on-signal.mjs).
          ["--import", new URL("../lib/alloc-on-signal.mjs", import.meta.url).href]
        : []),
  // BENCH_TURN_TRACE=<dir>: the daemon's GCs and event-loop delay and the client's turns on one clock
  // (with BENCH_CPU_PROF, also what the daemon ran during the slow turns: `node bench/turn/trace-report.mjs`).
  ...(process.env.BENCH_TURN_TRACE ? ["--import", new URL("./trace-preload.mjs", import.meta.url).href] : [])
]
const { daemon, url, token } = await startPalyrad({
  bin,
  dir,
  modelUrl,
  // BENCH_TURN_TOML: more configuration for the daemon (to see what a feature costs per turn).
  toml: (process.env.BENCH_TURN_TOML ?? "").replaceAll("\\n", "\n"),
  nodeFlags: profile
})

// ---- the client, in its own process ------------------------------------------------------------
const counts = quick
  ? { plain: 30, tool: 15, sessions: 20, perSession: 3, rss: 40 }
  : { plain: 300, tool: 150, sessions: 20, perSession: 10, rss: 200 }
// A server's CPU time (user + system, all threads, from /proc) over everything the client does.
const cpuMs = cpuMsOf
type Figures = {
  plain: { p50: number; p99: number }
  steady: { p50: number; p99: number }
  tool: { p50: number; p99: number }
  turnsPerSec20: number
}
// Runs the client against a server; its figures, and the server's CPU per turn.
const drive = async (server: ChildProcess, url: string, token: string, counts: Record<string, number>) => {
  const cpuBefore = cpuMs(server.pid!)
  // Async: this process serves the model while the client runs.
  const client = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", join(here, "client.ts"), url, token, JSON.stringify(counts)],
      {
        cwd: here,
        stdio: ["ignore", "pipe", "pipe"]
      }
    )
    let stdout = ""
    let stderr = ""
    child.stdout!.on("data", (d) => (stdout += d))
    child.stderr!.on("data", (d) => (stderr += d))
    const timer = setTimeout(() => child.kill("SIGKILL"), 600_000)
    child.on("exit", (status) => {
      clearTimeout(timer)
      resolve({ status, stdout, stderr })
    })
  })
  if (client.status !== 0) {
    server.kill("SIGKILL")
    throw new Error(`client failed (${client.status}): ${client.stderr}${client.stdout}`)
  }
  const turns = 5 + counts.plain! + counts.tool! + counts.sessions! * counts.perSession! + counts.rss!
  return {
    figures: JSON.parse(client.stdout.trim().split("\n").at(-1)!) as Figures,
    cpuMsPerTurn: (cpuMs(server.pid!) - cpuBefore) / turns
  }
}
const { figures, cpuMsPerTurn } = await drive(daemon, url, token, counts)
const rssMb = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${daemon.pid}/status`, "utf8"))![1]) / 1024
await collectGarbage(daemon.pid!)
const rssBurst = rssMb()
// Once quiet, the daemon's memory reducer returns what the burst left pooled (see bench/daemon).
await new Promise((r) => setTimeout(r, 5000))
await collectGarbage(daemon.pid!)
const rss = rssMb()
await new Promise<void>((r) => {
  daemon.on("exit", () => r())
  daemon.kill("SIGTERM")
})
rmSync(dir, { recursive: true, force: true })

// Counted for palyrad alone (the floors open their own).
const daemonModelConnections = modelConnections

// ---- the floors: the same client and model server, without Palyra --------------------------------
const floor = async (mode: "provider" | "raw") => {
  const server = spawn(process.execPath, ["--import", "tsx", join(here, "floor.ts"), modelUrl, mode], {
    cwd: here,
    stdio: ["ignore", "ignore", "pipe"]
  })
  const url = await listening(server, `floor ${mode}`)
  // No memory phase: a floor keeps no sessions.
  const driven = await drive(server, url, "", { ...counts, rss: 0 })
  server.removeAllListeners("exit")
  server.kill("SIGKILL")
  return driven
}
const stack = await floor("provider")
const raw = await floor("raw")
model.close()

table("a turn end to end: POST /v1/runs?stream=true → final RunStateChanged (ms)", [
  {
    turn: "plain (one model call)",
    p50: round(figures.plain.p50),
    p99: round(figures.plain.p99),
    goal: "p50 ≤ 2, p99 ≤ 5"
  },
  {
    turn: "  the same, second half of the plain turns (warm)",
    p50: round(figures.steady.p50),
    p99: round(figures.steady.p99),
    goal: ""
  },
  {
    turn: "one time.now call (two model calls)",
    p50: round(figures.tool.p50),
    p99: round(figures.tool.p99),
    goal: "p50 ≤ 5"
  }
])
table("load", [
  {
    measure: `${counts.sessions} sessions × ${counts.perSession} turns`,
    value: `${round(figures.turnsPerSec20, 1)} turns/s`,
    goal: "≥ 1,000"
  },
  { measure: "daemon CPU per turn (all phases)", value: `${round(cpuMsPerTurn, 2)} ms`, goal: "" },
  { measure: "connections the model server accepted", value: `${daemonModelConnections}`, goal: "" },
  { measure: `RSS after ${counts.rss} one-message sessions`, value: `${round(rss, 1)} MB`, goal: "≤ 200 MB" },
  { measure: "  the same, right after the last turn", value: `${round(rssBurst, 1)} MB`, goal: "" }
])
const row = (server: string, f: Figures, cpu: number) => ({
  server,
  "plain p50": round(f.plain.p50),
  "plain p99": round(f.plain.p99),
  "tool p50": round(f.tool.p50),
  [`turns/s (${counts.sessions}×${counts.perSession})`]: round(f.turnsPerSec20, 1),
  "CPU ms/turn": round(cpu, 2)
})
table("the same turns without Palyra: floors (same client, same model server, same run)", [
  row("palyrad", figures, cpuMsPerTurn),
  row("node:http + the AI SDK provider (the stack's floor)", stack.figures, stack.cpuMsPerTurn),
  row("node:http + raw http.request (the machine's floor)", raw.figures, raw.cpuMsPerTurn)
])
result("turn", {
  turnP50Ms: round(figures.plain.p50),
  turnP99Ms: round(figures.plain.p99),
  turnP50SteadyMs: round(figures.steady.p50),
  turnP99SteadyMs: round(figures.steady.p99),
  toolTurnP50Ms: round(figures.tool.p50),
  turnsPerSec20: round(figures.turnsPerSec20, 1),
  rssAfter200SessionsMb: round(rss, 1),
  rssAfter200SessionsBurstMb: round(rssBurst, 1),
  cpuMsPerTurn: round(cpuMsPerTurn, 2),
  modelConnections: daemonModelConnections,
  floorTurnP50Ms: round(stack.figures.plain.p50),
  floorToolTurnP50Ms: round(stack.figures.tool.p50),
  floorTurnsPerSec20: round(stack.figures.turnsPerSec20, 1),
  floorCpuMsPerTurn: round(stack.cpuMsPerTurn, 2),
  rawFloorTurnP50Ms: round(raw.figures.plain.p50),
  rawFloorTurnsPerSec20: round(raw.figures.turnsPerSec20, 1),
  rawFloorCpuMsPerTurn: round(raw.cpuMsPerTurn, 2),
  turnP50RatioToFloor: round(figures.plain.p50 / stack.figures.plain.p50),
  cpuRatioToFloor: round(cpuMsPerTurn / stack.cpuMsPerTurn)
})

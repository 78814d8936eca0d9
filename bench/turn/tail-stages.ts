/**
 * bench/turn/tail-stages.ts: what the slowest 1% of plain turns wait on (PERF-NOTES round 16,
 * slice T). The built palyrad (or `BENCH_TURN_BIN`) with the bench model in this process and a
 * client in its own process (`--client`), `turns` plain turns one after another (default 1,000, over
 * 25 sessions). Each turn is cut into three stages on one wall clock: **in** (the client's request →
 * the model request's arrival: the client's send, the daemon's parse, admission, prompt, provider
 * request), **model** (arrival → the answer's last byte written, this process), **out** (→ the client
 * reading the run's end frame: the daemon's stream parse, the end commit, the response, the client's
 * read). Beside them, what overlapped each slow turn: the daemon's GCs, its event-loop stalls and
 * slow timer callbacks (named: `trace-preload.mjs` with `BENCH_TURN_STALLS=1`), the journal writer's
 * commits and idle checkpoints (`PALYRA_JOURNAL_TRACE`), and this process's and the client's own stalls.
 * `BENCH_TAIL_SERVER=raw|provider` drives one of `floor.ts`'s servers instead, traced the same way.
 * `node --import tsx bench/turn/tail-stages.ts [turns=1000] [dir]`; last line JSON.
 * Not in `pnpm bench --all` (no `index.ts`).
 */
import { spawn } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { benchModel, listening, listenModel, startPalyrad, streamTurn } from "./harness.js"
// @ts-expect-error: a plain .mjs helper shared with the daemon's preload
import { watchStalls } from "./stalls.mjs"

type Span = { at: number; ms: number; cpuMs?: number }
const wall = () => performance.timeOrigin + performance.now()

if (process.argv[2] === "--client") {
  // The client: warm up, then the timed turns; writes each turn's start and end (wall clock) and its own stalls.
  const [, , , url, token, n, out] = process.argv as unknown as [string, string, string, string, string, string, string]
  for (let i = 0; i < 5; i++) await streamTurn(url, token, "hello", `warm-${i}`)
  const stalls = watchStalls()
  const turns: Array<{ t0: number; t1: number }> = []
  for (let i = 0; i < Number(n); i++) {
    const t0 = wall()
    await streamTurn(url, token, "hello", `tail-${i % 25}`)
    turns.push({ t0, t1: wall() })
  }
  writeFileSync(out, JSON.stringify({ turns, stalls: stalls.stop() }))
  process.exit(0)
}

const here = dirname(fileURLToPath(import.meta.url))
const root = join(here, "..", "..")
const bin = process.env.BENCH_TURN_BIN ?? join(root, "packages/daemon/dist/bin/palyrad.js")
const n = Number(process.argv[2] ?? 1000)
const traceDir = process.argv[3] ?? mkdtempSync(join(tmpdir(), "palyra-tail-"))
mkdirSync(traceDir, { recursive: true })

const calls: Array<{ arrived: number; answered: number }> = []
// BENCH_TAIL_MODEL_DELAY_MS: the model's time to its answer (0: at once), to see the in stage with a model that takes time.
const model = benchModel(
  (c) => calls.push({ arrived: performance.timeOrigin + c.arrived, answered: performance.timeOrigin + c.answered }),
  Number(process.env.BENCH_TAIL_MODEL_DELAY_MS ?? 0)
)
const modelUrl = await listenModel(model)
const modelStalls = watchStalls()
process.env.BENCH_TURN_TRACE = traceDir
process.env.BENCH_TURN_STALLS = "1"
process.env.PALYRA_JOURNAL_TRACE = traceDir
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-tail-"))
// BENCH_TAIL_SERVER=raw|provider: one of `floor.ts`'s servers instead of palyrad (the same client,
// model server, stages and stall monitors; no journal): the machine's own tail in the same minutes.
const floor = process.env.BENCH_TAIL_SERVER
const traced = ["--import", new URL("./trace-preload.mjs", import.meta.url).href]
const started =
  floor === "raw" || floor === "provider"
    ? await (async () => {
        const server = spawn(
          process.execPath,
          ["--import", "tsx", ...traced, join(here, "floor.ts"), modelUrl, floor],
          {
            cwd: here,
            stdio: ["ignore", "ignore", "pipe"]
          }
        )
        return { daemon: server, url: await listening(server, `floor ${floor}`), token: "floor" }
      })()
    : await startPalyrad({
        bin,
        dir,
        modelUrl,
        // BENCH_TAIL_FLAGS: more node flags for the daemon (e.g. V8's GC flags, to see what they do to the tail).
        nodeFlags: [...(process.env.BENCH_TAIL_FLAGS ?? "").split(" ").filter(Boolean), ...traced]
      })
const { daemon, url, token } = started
const clientOut = join(traceDir, "tail-client.json")
await new Promise<void>((resolve, reject) => {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", fileURLToPath(import.meta.url), "--client", url, token, String(n), clientOut],
    {
      cwd: here,
      stdio: ["ignore", "inherit", "inherit"]
    }
  )
  child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`client exited ${code}`))))
})
const mine: Array<Span> = modelStalls.stop()
daemon.kill("SIGUSR2")
const daemonFile = join(traceDir, `daemon.${daemon.pid}.json`)
while (!existsSync(daemonFile)) await new Promise((r) => setTimeout(r, 50))
await new Promise((r) => setTimeout(r, 200))
daemon.kill("SIGTERM")
await new Promise((r) => daemon.once("exit", r))
model.close()
rmSync(dir, { recursive: true, force: true })

// ---- the report ---------------------------------------------------------------------------------
const client = JSON.parse(readFileSync(clientOut, "utf8")) as {
  turns: Array<{ t0: number; t1: number }>
  stalls: Array<Span>
}
const d = JSON.parse(readFileSync(daemonFile, "utf8")) as {
  gcs: Array<Span & { kind: string }>
  stalls: Array<Span>
  slowTimers: Array<Span & { kind: string; name: string }>
}
const journal = readdirSync(traceDir)
  .filter((f) => f.startsWith("journal.") && f.endsWith(".jsonl"))
  .flatMap((f) =>
    readFileSync(join(traceDir, f), "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Span & { kind: string; walSyncMs?: number })
  )
const commits = journal.filter((j) => j.kind === "commit")
const copies = journal.filter((j) => j.kind === "checkpoint").map((c) => ({ at: c.at + (c.walSyncMs ?? 0), ms: c.ms }))

const turns = client.turns.flatMap(({ t0, t1 }) => {
  const call = calls.find((c) => c.arrived >= t0 - 0.5 && c.answered <= t1 + 0.5)
  if (call === undefined) return []
  return [{ t0, t1, ms: t1 - t0, in: call.arrived - t0, model: call.answered - call.arrived, out: t1 - call.answered }]
})
type Turn = (typeof turns)[number]
const overlapMs = (t: Turn, spans: ReadonlyArray<Span>) =>
  spans.reduce((sum, s) => sum + Math.max(0, Math.min(t.t1, s.at + s.ms) - Math.max(t.t0, s.at)), 0)
// The CPU the thread spent in the stalls overlapping a turn (a stall's CPU, prorated by its overlap).
const cpuIn = (t: Turn, spans: ReadonlyArray<Span>) =>
  spans.reduce((sum, s) => sum + ((s.cpuMs ?? 0) * overlapMs(t, [s])) / Math.max(s.ms, 1e-9), 0)
const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0
const r2 = (x: number) => Math.round(x * 100) / 100
const byMs = [...turns].sort((a, b) => b.ms - a.ms)
const slowest = byMs.slice(0, Math.max(1, Math.ceil(turns.length / 100)))
const med = {
  ms: median(turns.map((t) => t.ms)),
  in: median(turns.map((t) => t.in)),
  model: median(turns.map((t) => t.model)),
  out: median(turns.map((t) => t.out))
}
const p99 = slowest.at(-1)!.ms
const causes = (t: Turn) => ({
  daemonGcMs: r2(overlapMs(t, d.gcs)),
  daemonStallMs: r2(overlapMs(t, d.stalls)),
  daemonStallCpuMs: r2(cpuIn(t, d.stalls)),
  daemonSlowTimers: d.slowTimers
    .filter((s) => overlapMs(t, [s]) > 0)
    .map((s) => `${s.kind} ${r2(s.ms)}ms ${s.name.slice(0, 60)}`),
  commitsOver1Ms: commits.filter((c) => c.ms > 1 && overlapMs(t, [c]) > 0).map((c) => r2(c.ms)),
  checkpointCopyMs: r2(overlapMs(t, copies)),
  clientStallMs: r2(overlapMs(t, client.stalls)),
  modelServerStallMs: r2(overlapMs(t, mine))
})
console.log(
  `${turns.length} plain turns; median ${r2(med.ms)} ms (in ${r2(med.in)}, model ${r2(med.model)}, out ${r2(med.out)}); p99 ${r2(p99)} ms`
)
console.log("slowest 1%: ms = in + model + out | what overlapped")
for (const t of slowest)
  console.log(`${r2(t.ms)} = ${r2(t.in)} + ${r2(t.model)} + ${r2(t.out)} | ${JSON.stringify(causes(t))}`)
const mean = (f: (t: Turn) => number) => r2(slowest.reduce((s, t) => s + f(t), 0) / slowest.length)
const share = (f: (t: Turn) => boolean) => r2((100 * slowest.filter(f).length) / slowest.length)
const timerNames = new Map<string, { n: number; ms: number; max: number }>()
for (const s of d.slowTimers) {
  const k = `${s.kind} ${s.name.slice(0, 80)}`
  const e = timerNames.get(k) ?? { n: 0, ms: 0, max: 0 }
  timerNames.set(k, { n: e.n + 1, ms: e.ms + s.ms, max: Math.max(e.max, s.ms) })
}
console.log("daemon timer callbacks ≥ 0.5 ms over the run (count, total ms, max ms):")
for (const [k, v] of [...timerNames].sort((a, b) => b[1].ms - a[1].ms).slice(0, 8))
  console.log(`  ${v.n}× ${r2(v.ms)} (max ${r2(v.max)})  ${k}`)
// The daemon's scavenges while the turns ran.
const from = client.turns[0]?.t0 ?? 0
const to = client.turns.at(-1)?.t1 ?? 0
const minor = d.gcs.filter((g) => g.kind === "minor" && g.at >= from && g.at <= to).map((g) => g.ms)
const summary = {
  bench: "turn-tail-stages",
  server: floor === "raw" || floor === "provider" ? `floor ${floor}` : "palyrad",
  turns: turns.length,
  p50Ms: r2(med.ms),
  p99Ms: r2(p99),
  medianStageMs: { in: r2(med.in), model: r2(med.model), out: r2(med.out) },
  slowestExcessMs: {
    in: mean((t) => t.in - med.in),
    model: mean((t) => t.model - med.model),
    out: mean((t) => t.out - med.out)
  },
  slowestMeanOverlapMs: {
    daemonGc: mean((t) => overlapMs(t, d.gcs)),
    daemonStall: mean((t) => overlapMs(t, d.stalls)),
    daemonStallCpu: mean((t) => cpuIn(t, d.stalls)),
    daemonSlowTimers: mean((t) => overlapMs(t, d.slowTimers)),
    checkpointCopy: mean((t) => overlapMs(t, copies)),
    clientStall: mean((t) => overlapMs(t, client.stalls)),
    modelServerStall: mean((t) => overlapMs(t, mine))
  },
  slowestSharePct: {
    daemonGcOver1Ms: share((t) => overlapMs(t, d.gcs) > 1),
    daemonStallOver2Ms: share((t) => overlapMs(t, d.stalls) > 2),
    commitOver1Ms: share((t) => commits.some((c) => c.ms > 1 && overlapMs(t, [c]) > 0)),
    checkpointCopy: share((t) => overlapMs(t, copies) > 0),
    clientStallOver2Ms: share((t) => overlapMs(t, client.stalls) > 2),
    allThreeStalledOver2Ms: share(
      (t) => overlapMs(t, d.stalls) > 2 && overlapMs(t, client.stalls) > 2 && overlapMs(t, mine) > 2
    ),
    modelServerStallOver2Ms: share((t) => overlapMs(t, mine) > 2)
  },
  daemonMinorGcs: minor.length,
  daemonMinorGcMs: {
    p50: r2(median(minor)),
    p99: r2([...minor].sort((a, b) => a - b)[Math.floor(0.99 * (minor.length - 1))] ?? 0),
    total: r2(minor.reduce((a, b) => a + b, 0))
  },
  daemonEventLoopStalls: d.stalls.length,
  daemonStallMsTotal: r2(d.stalls.reduce((s, x) => s + x.ms, 0)),
  daemonStallCpuMsTotal: r2(d.stalls.reduce((s, x) => s + (x.cpuMs ?? 0), 0)),
  traceDir
}
console.log(JSON.stringify(summary))

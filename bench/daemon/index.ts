/**
 * bench/daemon: palyrad cold start to ready (the whole process, from spawn to a 200 on /readyz;
 * median of several starts; `coldStart…` with no compile cache, as a first start on a machine,
 * `warmStart…` with the cache an earlier start wrote) and its resident memory idle, with 1,000 and with 10,000 idle sessions
 * (each read after a forced full GC: the daemon runs with a bench-only `--expose-gc` preload).
 * Each RSS figure is read once the daemon has been quiet for `settleMs` (its memory reducer returns
 * the pages a burst of requests left pooled once the event loop goes quiet: `rss…Mb`), and also
 * right after the burst, as before that mechanism existed (`rss…BurstMb`).
 * `firstTurnMs`: a cold start's first turn (the AI SDK provider against a local chat-completions
 * server), timed from ready; `secondTurnMs` the turn after it.
 * Uses the built binary (packages/daemon/dist), building it first if it is missing.
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { collectGarbage, daemonEnv, gcFlags, quick, result, round, shebangFlags, table } from "../lib/report.js"
import { benchModel, listenModel, streamTurn } from "../turn/harness.js"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..")
// BENCH_DAEMON_BIN: another build of palyrad.js (e.g. a copy of the previous dist, for before/after runs).
const bin = process.env.BENCH_DAEMON_BIN ?? join(root, "packages/daemon/dist/bin/palyrad.js")
if (!existsSync(bin)) {
  console.error("building the daemon first (pnpm run build)…")
  const built = spawnSync("pnpm", ["run", "build"], { cwd: root, stdio: "inherit" })
  if (built.status !== 0) process.exit(built.status ?? 1)
}

const rssMb = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024
}

/** CPU time (user + system, ms) of a process (all its threads) and of its main thread, from /proc. */
const cpuMs = (pid: number) => {
  const ticks = (file: string) => {
    // The fields after the command name (which may contain spaces): utime and stime are 14th and 15th.
    const fields = readFileSync(file, "utf8").split(") ")[1]!.split(" ")
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100 // USER_HZ is 100 on Linux
  }
  return { total: ticks(`/proc/${pid}/stat`), main: ticks(`/proc/${pid}/task/${pid}/stat`) }
}

// palyrad turns on Node's compile cache (`module.enableCompileCache()` in bin/palyrad.ts), kept in
// `NODE_COMPILE_CACHE` (else os.tmpdir()): every start after the first reads its code from there. Each
// start here gets its own cache directory — empty for a first start (`coldStart…`), or one an earlier
// start has filled (`warmStart…`) — so neither figure depends on what ran on this machine before.
const start = async (dir: string, compileCache: string, flags: ReadonlyArray<string> = []) => {
  const t0 = performance.now()
  const proc = spawn(process.execPath, [...shebangFlags(bin), ...flags, bin, "--port", "0", "--log-format", "json"], {
    cwd: dir,
    stdio: ["ignore", "ignore", "pipe"],
    env: {
      ...process.env,
      ...daemonEnv(),
      PALYRA_LOG_LEVEL: "warning",
      PALYRA_GRPC_PORT: "0",
      NODE_COMPILE_CACHE: compileCache
    }
  })
  let err = ""
  const url = await new Promise<string>((resolve, reject) => {
    proc.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/\S+)/.exec(err)
      if (m) resolve(m[1]!)
    })
    proc.on("exit", (code) => reject(new Error(`palyrad exited ${code}: ${err}`)))
  })
  while (true) {
    const ok = await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false
    )
    if (ok) break
    await new Promise((r) => setTimeout(r, 2)) // a real delay: a busy poll would compete with the start for CPU
  }
  const ms = performance.now() - t0
  const cpu = cpuMs(proc.pid!)
  const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
  return { proc, url, token, ms, cpu }
}

const stop = (proc: ReturnType<typeof spawn>) =>
  new Promise<void>((r) => {
    proc.on("exit", () => r())
    proc.kill("SIGTERM")
  })

const main = async () => {
  const dir = mkdtempSync(join(tmpdir(), "palyra-bench-daemon-"))
  const caches = mkdtempSync(join(tmpdir(), "palyra-bench-compile-cache-"))
  const warmCache = join(caches, "warm")
  // Not counted: creates the journal and the token (every counted start opens an existing data dir,
  // as a restart does) and fills the warm starts' compile cache.
  await stop((await start(dir, warmCache)).proc)
  type Start = { ms: number; cpu: { total: number; main: number } }
  const cold: Array<Start> = []
  const warm: Array<Start> = []
  const runs = quick ? 3 : 7
  for (let i = 0; i < runs; i++) {
    // Alternating, so a change of load on this shared machine falls on both figures alike.
    const c = await start(dir, join(caches, `cold-${i}`))
    cold.push(c)
    await stop(c.proc)
    const w = await start(dir, warmCache)
    warm.push(w)
    await stop(w.proc)
  }
  const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const starts = cold.map((s) => s.ms)
  const cpus = cold.map((s) => s.cpu)
  // The first start on this machine (no compile cache): the goal's figure.
  const coldStartMs = median(starts)
  // CPU to ready is the figure to compare across loads: wall time on a shared machine is mostly waiting.
  const coldStartCpuMs = median(cpus.map((c) => c.total))
  const coldStartMainCpuMs = median(cpus.map((c) => c.main))
  // Every later start (the compile cache filled by an earlier one).
  const warmStartMs = median(warm.map((s) => s.ms))
  const warmStartCpuMs = median(warm.map((s) => s.cpu.total))
  const warmStartMainCpuMs = median(warm.map((s) => s.cpu.main))

  // A cold start's first turn and the turn after it, from ready (its own data dir: a configured
  // model, so the AI SDK provider, which palyrad loads on a model's first call, is part of it).
  const model = benchModel()
  const modelUrl = await listenModel(model)
  const turnDir = mkdtempSync(join(tmpdir(), "palyra-bench-daemon-turn-"))
  writeFileSync(join(turnDir, "palyra.toml"), `model = "openai-compatible:${modelUrl}#bench"\n`)
  await stop((await start(turnDir, join(caches, "turn-init"))).proc)
  const firstTurns: Array<number> = []
  const secondTurns: Array<number> = []
  for (let i = 0; i < runs; i++) {
    const t = await start(turnDir, join(caches, `turn-${i}`))
    firstTurns.push(await streamTurn(t.url, t.token, "hello", `first-${i}`))
    secondTurns.push(await streamTurn(t.url, t.token, "hello", `second-${i}`))
    await stop(t.proc)
  }
  model.close()
  rmSync(turnDir, { recursive: true, force: true })
  const firstTurnMs = median(firstTurns)
  const secondTurnMs = median(secondTurns)

  // Two of the daemon's 2 s utilization windows and a margin (packages/daemon/src/internal/memoryReducer.ts).
  const settleMs = 5000
  const settled = async (pid: number) => {
    await collectGarbage(pid)
    const burst = rssMb(pid)
    await new Promise((r) => setTimeout(r, settleMs))
    await collectGarbage(pid)
    return { burst, settled: rssMb(pid) }
  }
  const d = await start(dir, warmCache, gcFlags)
  await new Promise((r) => setTimeout(r, 500))
  const idle = await settled(d.proc.pid!)
  const [few, many] = quick ? [100, 1000] : [1000, 10_000]
  const createSessions = async (from: number, to: number) => {
    for (let i = from; i < to; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, to - i) }, (_, k) =>
          fetch(`${d.url}/v1/sessions`, {
            method: "POST",
            headers: { authorization: `Bearer ${d.token}`, "content-type": "application/json" },
            body: JSON.stringify({ sessionKey: `idle-${i + k}`, title: "idle session" })
          }).then((r) => r.json())
        )
      )
    }
  }
  await createSessions(0, few)
  const loaded = await settled(d.proc.pid!)
  await createSessions(few, many)
  const loadedMany = await settled(d.proc.pid!)
  await stop(d.proc)
  rmSync(dir, { recursive: true, force: true })
  rmSync(caches, { recursive: true, force: true })

  table("palyrad", [
    {
      measure: `cold start to ready, no compile cache (median of ${runs})`,
      value: `${Math.round(coldStartMs)} ms`,
      goal: "≤ 400 ms"
    },
    {
      measure: "CPU to ready, all threads / main thread (median)",
      value: `${Math.round(coldStartCpuMs)} / ${Math.round(coldStartMainCpuMs)} ms`,
      goal: "–"
    },
    {
      measure: `warm start to ready, compile cache filled (median of ${runs})`,
      value: `${Math.round(warmStartMs)} ms`,
      goal: "–"
    },
    {
      measure: "its CPU to ready, all threads / main thread (median)",
      value: `${Math.round(warmStartCpuMs)} / ${Math.round(warmStartMainCpuMs)} ms`,
      goal: "–"
    },
    {
      measure: `a cold start's first turn / its second turn, from ready (median of ${runs})`,
      value: `${round(firstTurnMs, 1)} / ${round(secondTurnMs, 1)} ms`,
      goal: "–"
    },
    { measure: "RSS, idle", value: `${round(idle.settled, 1)} MB`, goal: "≤ 150 MB" },
    { measure: `RSS, ${few} idle sessions`, value: `${round(loaded.settled, 1)} MB`, goal: "≤ 150 MB" },
    { measure: `RSS, ${many} idle sessions`, value: `${round(loadedMany.settled, 1)} MB`, goal: "≤ 200 MB" },
    { measure: "RSS, idle, right after start", value: `${round(idle.burst, 1)} MB`, goal: "–" },
    { measure: `RSS, ${few} sessions, right after the burst`, value: `${round(loaded.burst, 1)} MB`, goal: "–" },
    { measure: `RSS, ${many} sessions, right after the burst`, value: `${round(loadedMany.burst, 1)} MB`, goal: "–" }
  ])
  console.log(`cold starts (ms): ${starts.map((s) => Math.round(s)).join(", ")}`)
  console.log(`CPU to ready (ms, all threads/main): ${cpus.map((c) => `${c.total}/${c.main}`).join(", ")}`)
  console.log(`warm starts (ms): ${warm.map((s) => Math.round(s.ms)).join(", ")}`)
  console.log(`CPU to ready (ms, all threads/main): ${warm.map((s) => `${s.cpu.total}/${s.cpu.main}`).join(", ")}`)
  result("daemon", {
    coldStartMs: Math.round(coldStartMs),
    coldStartCpuMs: Math.round(coldStartCpuMs),
    coldStartMainCpuMs: Math.round(coldStartMainCpuMs),
    warmStartMs: Math.round(warmStartMs),
    warmStartCpuMs: Math.round(warmStartCpuMs),
    warmStartMainCpuMs: Math.round(warmStartMainCpuMs),
    firstTurnMs: round(firstTurnMs, 1),
    secondTurnMs: round(secondTurnMs, 1),
    rssIdleMb: round(idle.settled, 1),
    rss1000Mb: round(loaded.settled, 1),
    rss10000Mb: round(loadedMany.settled, 1),
    rssIdleStartMb: round(idle.burst, 1),
    rss1000BurstMb: round(loaded.burst, 1),
    rss10000BurstMb: round(loadedMany.burst, 1)
  })
}

await main()

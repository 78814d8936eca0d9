// Attributes the slow plain turns of a traced `bench turn` run (PERF-NOTES round 12, slice A):
//   node bench/turn/tail-report.mjs <dir> --run
// runs `pnpm bench turn` with BENCH_TURN_TRACE=<dir> PALYRA_JOURNAL_TRACE=<dir> (add
// PALYRA_JOURNAL_CHECKPOINT=auto for the writer's checkpoints as before round 12), keeps palyrad's
// client.json as client.palyrad.json (the floors' clients overwrite client.json later in the run),
// prints the bench's last line, then the report; without --run it reports on <dir> as it is.
// For every plain turn it finds, on one wall clock, what overlapped it in the daemon: a journal commit
// that ran SQLite's automatic checkpoint, the copy of an idle checkpoint, any other commit over 1 ms,
// a major/incremental GC, minor GCs (their total ms). Prints, for the turns slower than 2× the median
// and for all turns, the share each cause touches, and the share of slow turns none explains.
import { spawn } from "node:child_process"
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const dir = process.argv[2]
if (process.argv.includes("--run")) {
  mkdirSync(dir, { recursive: true })
  const bench = spawn("pnpm", ["bench", "turn", ...process.argv.slice(4)], {
    env: { ...process.env, BENCH_TURN_TRACE: dir, PALYRA_JOURNAL_TRACE: dir },
    stdio: ["ignore", "pipe", "inherit"]
  })
  let out = ""
  bench.stdout.on("data", (d) => (out += d))
  const poll = setInterval(() => {
    if (!existsSync(join(dir, "client.palyrad.json")) && existsSync(join(dir, "client.json"))) {
      // Written in one call; give it a moment to be whole.
      setTimeout(() => copyFileSync(join(dir, "client.json"), join(dir, "client.palyrad.json")), 200)
      clearInterval(poll)
    }
  }, 100)
  await new Promise((r) => bench.on("exit", r))
  console.log(out.trim().split("\n").at(-1))
}
const clientFile = existsSync(join(dir, "client.palyrad.json")) ? "client.palyrad.json" : "client.json"
const turns = JSON.parse(readFileSync(join(dir, clientFile), "utf8"))
const daemonFile = readdirSync(dir).find((f) => f.startsWith("daemon."))
const gcs = daemonFile ? JSON.parse(readFileSync(join(dir, daemonFile), "utf8")).gcs : []
const journal = readdirSync(dir)
  .filter((f) => f.startsWith("journal.") && f.endsWith(".jsonl"))
  .flatMap((f) =>
    readFileSync(join(dir, f), "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l))
  )
const commits = journal.filter((l) => l.kind === "commit")
const checkpoints = journal.filter((l) => l.kind === "checkpoint")
const sorted = turns.map((t) => t.ms).sort((a, b) => a - b)
const p50 = sorted[Math.floor(sorted.length / 2)]
const p99 = sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)]
const overlaps = (t, from, ms) => from < t.at + t.ms && from + ms > t.at

const causes = {
  autoCheckpoint: (t) => commits.some((c) => c.autoCheckpoint && overlaps(t, c.at, c.ms)),
  idleCheckpointCopy: (t) => checkpoints.some((c) => overlaps(t, c.at + (c.walSyncMs ?? 0), c.ms)),
  slowCommit: (t) => commits.some((c) => !c.autoCheckpoint && c.ms > 1 && overlaps(t, c.at, c.ms)),
  majorGc: (t) => gcs.some((g) => (g.kind === "major" || g.kind === "incremental") && overlaps(t, g.at, g.ms)),
  minorGcOver1Ms: (t) =>
    gcs.filter((g) => g.kind === "minor" && overlaps(t, g.at, g.ms)).reduce((a, g) => a + g.ms, 0) > 1
}
const share = (list) => {
  const out = {}
  for (const [name, f] of Object.entries(causes))
    out[name] = Math.round((list.filter(f).length / list.length) * 1000) / 10
  out.none = Math.round((list.filter((t) => !Object.values(causes).some((f) => f(t))).length / list.length) * 1000) / 10
  return out
}
const slow = turns.filter((t) => t.ms > 2 * p50)
const r2 = (x) => Math.round(x * 100) / 100
const commitMs = commits.map((c) => c.ms).sort((a, b) => a - b)
const pct = (a, p) => a[Math.min(a.length - 1, Math.ceil((p / 100) * a.length) - 1)]
console.log(
  JSON.stringify(
    {
      turns: turns.length,
      p50: r2(p50),
      p99: r2(p99),
      slowTurns: slow.length,
      slowShare: r2((slow.length / turns.length) * 100),
      "causes of slow turns (% of slow turns touched)": share(slow),
      "causes among all turns (%)": share(turns),
      commits: {
        n: commits.length,
        p50: r2(pct(commitMs, 50) ?? 0),
        p99: r2(pct(commitMs, 99) ?? 0),
        p999: r2(pct(commitMs, 99.9) ?? 0),
        max: r2(commitMs.at(-1) ?? 0),
        autoCheckpoints: commits.filter((c) => c.autoCheckpoint).length,
        autoCheckpointMs: commits.filter((c) => c.autoCheckpoint).map((c) => r2(c.ms))
      },
      idleCheckpoints: {
        n: checkpoints.length,
        copyMsMax: r2(Math.max(0, ...checkpoints.map((c) => c.ms))),
        copyMsMean: r2(checkpoints.reduce((a, c) => a + c.ms, 0) / (checkpoints.length || 1)),
        walSyncMsMean: r2(checkpoints.reduce((a, c) => a + (c.walSyncMs ?? 0), 0) / (checkpoints.length || 1)),
        dbSyncMsMean: r2(checkpoints.reduce((a, c) => a + (c.dbSyncMs ?? 0), 0) / (checkpoints.length || 1))
      },
      slowest: [...slow]
        .sort((a, b) => b.ms - a.ms)
        .slice(0, 12)
        .map((t) => ({
          ms: r2(t.ms),
          causes: Object.entries(causes)
            .filter(([, f]) => f(t))
            .map(([k]) => k)
        }))
    },
    null,
    1
  )
)

/**
 * Where the daemon's memory goes after `bench turn`'s client (the same turns, the same settle): RSS
 * split by what backs it, from /proc/<pid>/smaps — file-backed (the node binary's text, shared),
 * glibc's malloc arenas (the main `[heap]` and the 64 MB-reserved per-thread arenas), V8's 256 KB
 * heap pages (both isolates: the main thread's and the journal writer's) and the rest.
 * `node --import tsx bench/turn/rss-report.ts [palyrad.js] [--quick] [--snapshot <dir>]`; with
 * `--snapshot` it also writes a heap snapshot of the daemon (SIGUSR1) into <dir>.
 */
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { collectGarbage, quick } from "../lib/report.js"
import { benchModel, listenModel, startPalyrad } from "./harness.js"

const here = dirname(fileURLToPath(import.meta.url))
const args = process.argv.slice(2)
const snapshotAt = args.indexOf("--snapshot")
const snapshotDir = snapshotAt >= 0 ? args[snapshotAt + 1] : undefined
const bin =
  args.find((a, i) => !a.startsWith("--") && i !== snapshotAt + 1) ??
  join(here, "..", "..", "packages/daemon/dist/bin/palyrad.js")

const model = benchModel()
const modelUrl = await listenModel(model)
const dir = mkdtempSync(join(tmpdir(), "palyra-rss-report-"))
if (snapshotDir) mkdirSync(snapshotDir, { recursive: true })
const { daemon, url, token } = await startPalyrad({
  bin,
  dir,
  modelUrl,
  nodeFlags: snapshotDir ? ["--heapsnapshot-signal=SIGUSR1", `--diagnostic-dir=${snapshotDir}`] : []
})
const counts = quick
  ? { plain: 30, tool: 15, sessions: 20, perSession: 3, rss: 40 }
  : { plain: 300, tool: 150, sessions: 20, perSession: 10, rss: 200 }
await new Promise<void>((resolve, reject) => {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(here, "client.ts"), url, token, JSON.stringify(counts)],
    {
      cwd: here,
      stdio: ["ignore", "ignore", "inherit"]
    }
  )
  child.on("exit", (status) => (status === 0 ? resolve() : reject(new Error(`client exited ${status}`))))
})
await collectGarbage(daemon.pid!)
await new Promise((r) => setTimeout(r, 5000)) // the daemon's memory reducer (as bench turn)
await collectGarbage(daemon.pid!)

type Mapping = { start: bigint; rss: number; size: number; name: string }
const mappings: Array<Mapping> = []
for (const line of readFileSync(`/proc/${daemon.pid}/smaps`, "utf8").split("\n")) {
  const head = /^([0-9a-f]+)-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line)
  if (head) mappings.push({ start: BigInt(`0x${head[1]}`), rss: 0, size: 0, name: head[2] ?? "" })
  const size = /^Size:\s+(\d+) kB/.exec(line)
  if (size) mappings.at(-1)!.size = Number(size[1])
  const rss = /^Rss:\s+(\d+) kB/.exec(line)
  if (rss) mappings.at(-1)!.rss = Number(rss[1])
}
const kind = (m: Mapping) =>
  m.name.startsWith("/")
    ? "file-backed (binary, libraries)"
    : m.name === "[heap]"
      ? "malloc: main arena ([heap])"
      : m.start % (64n << 20n) === 0n // a thread arena's heap: 64 MB-aligned, its used part read-write
        ? "malloc: per-thread arenas (64 MB reserved)"
        : m.size === 256 || m.size === 260
          ? "V8 heap pages (256 KB)"
          : "other anonymous (V8 large objects, stacks, wasm…)"
const byKind = new Map<string, number>()
for (const m of mappings) byKind.set(kind(m), (byKind.get(kind(m)) ?? 0) + m.rss)
const total = mappings.reduce((n, m) => n + m.rss, 0)
console.log(`RSS ${(total / 1024).toFixed(1)} MB after ${counts.rss} one-message sessions (settled)`)
for (const [k, kb] of [...byKind].sort((a, b) => b[1] - a[1]))
  console.log(`${(kb / 1024).toFixed(1).padStart(8)} MB  ${k}`)
if (snapshotDir) {
  process.kill(daemon.pid!, "SIGUSR1")
  await new Promise((r) => setTimeout(r, 8000))
  console.log(`heap snapshot in ${snapshotDir}`)
}
daemon.kill("SIGTERM")
model.close()
rmSync(dir, { recursive: true, force: true })

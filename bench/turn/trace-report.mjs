// Summarizes a `BENCH_TURN_TRACE=<dir>` run of bench/turn: for the slow plain turns (above twice the
// median), which daemon GCs overlapped them, against the same for all turns.
// Usage: node bench/turn/trace-report.mjs <dir>
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { SourceMap } from "node:module"
import { join } from "node:path"

const dir = process.argv[2]
const turns = JSON.parse(readFileSync(join(dir, "client.json"), "utf8"))
const daemonFile = readdirSync(dir).find((f) => f.startsWith("daemon."))
const daemon = JSON.parse(readFileSync(join(dir, daemonFile), "utf8"))
const sorted = turns.map((t) => t.ms).sort((a, b) => a - b)
const p50 = sorted[Math.floor(sorted.length / 2)]
const overlap = (t) => daemon.gcs.filter((g) => g.at < t.at + t.ms && g.at + g.ms > t.at)
const summarize = (list) => {
  const byKind = {}
  for (const t of list)
    for (const g of overlap(t)) {
      byKind[g.kind] ??= { count: 0, ms: 0 }
      const k = byKind[g.kind]
      k.count++
      k.ms += g.ms
    }
  for (const k of Object.values(byKind)) k.ms = Math.round(k.ms * 100) / 100
  return {
    turns: list.length,
    meanMs: Math.round((list.reduce((a, t) => a + t.ms, 0) / list.length) * 100) / 100,
    gc: byKind
  }
}
const slow = turns.filter((t) => t.ms > 2 * p50)
const totals = {}
for (const g of daemon.gcs) {
  totals[g.kind] ??= { count: 0, ms: 0, maxMs: 0 }
  const k = totals[g.kind]
  k.count++
  k.ms = Math.round((k.ms + g.ms) * 100) / 100
  k.maxMs = Math.max(k.maxMs, Math.round(g.ms * 100) / 100)
}
console.log(
  JSON.stringify(
    {
      p50,
      eventLoopDelay: daemon.eventLoopDelay,
      gcTotals: totals,
      all: summarize(turns),
      slow: summarize(slow),
      slowTurns: slow.map((t) => ({
        ms: Math.round(t.ms * 100) / 100,
        gcs: overlap(t).map((g) => `${g.kind} ${g.ms.toFixed(2)}`)
      }))
    },
    null,
    1
  )
)

// With a CPU profile of the same run (BENCH_CPU_PROF): the daemon main thread's busy time inside the
// slow turns and inside the others, and the frames (self time) that fill the slow turns.
const profileFile = process.argv[3]
if (profileFile) {
  const profile = JSON.parse(readFileSync(profileFile, "utf8"))
  const nodes = new Map(profile.nodes.map((n) => [n.id, n.callFrame]))
  // Sample times on the wall clock (the profile's clock is the monotonic one the preload noted).
  const toWall = (us) => daemon.clock.wall + (us - daemon.clock.monoUs) / 1000
  const samples = []
  let t = profile.startTime
  profile.samples.forEach((id, i) => {
    t += profile.timeDeltas[i] ?? 0
    const frame = nodes.get(id)
    if (frame.functionName !== "(idle)")
      samples.push({ at: toWall(t), dt: (profile.timeDeltas[i + 1] ?? 0) / 1000, frame })
  })
  // Frames of the daemon's bundle named by their source (the `.map` beside each chunk).
  const maps = new Map()
  const where = (f) => {
    const path = f.url.replace(/^file:\/\//, "")
    if (!maps.has(path))
      maps.set(path, existsSync(`${path}.map`) ? new SourceMap(JSON.parse(readFileSync(`${path}.map`, "utf8"))) : null)
    const map = maps.get(path)
    const e = map?.findEntry(f.lineNumber, f.columnNumber)
    const [file, line] = e?.originalSource ? [e.originalSource, e.originalLine + 1] : [f.url, f.lineNumber + 1]
    return `${f.functionName || "(anonymous)"} ${file.replace(/^.*\/(node_modules|packages)\//, "")}:${line}`
  }
  const inTurns = (list) => {
    const frames = new Map()
    let busy = 0
    for (const s of samples)
      if (list.some((t) => s.at >= t.at && s.at < t.at + t.ms)) {
        busy += s.dt
        const k = where(s.frame)
        frames.set(k, (frames.get(k) ?? 0) + s.dt)
      }
    return {
      busyMsPerTurn: Math.round((busy / list.length) * 100) / 100,
      top: [...frames]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 15)
        .map(([k, ms]) => `${ms.toFixed(1)} ms ${k}`)
    }
  }
  // Long tasks: stretches of consecutive busy samples over 8 ms, with the frames that fill them
  // (on a loaded machine a stretch also holds time the thread was descheduled).
  const stretches = []
  let run = []
  const flush = () => {
    const ms = run.reduce((a, s) => a + s.dt, 0)
    if (ms > 8) {
      const frames = new Map()
      for (const s of run) frames.set(where(s.frame), (frames.get(where(s.frame)) ?? 0) + s.dt)
      const top = [...frames].sort((a, b) => b[1] - a[1]).slice(0, 6)
      stretches.push({ ms: Math.round(ms * 10) / 10, top: top.map(([k, v]) => `${v.toFixed(1)} ${k}`) })
    }
    run = []
  }
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i]
    const previous = samples[i - 1]
    if (previous !== undefined && s.at - previous.at > previous.dt + 0.5) flush()
    run.push(s)
  }
  flush()
  console.log(JSON.stringify({ longTasks: stretches.sort((a, b) => b.ms - a.ms).slice(0, 12) }, null, 1))
  const fast = turns.filter((t) => t.ms <= 2 * p50)
  console.log(JSON.stringify({ daemonBusyInSlow: inTurns(slow), daemonBusyInOthers: inTurns(fast) }, null, 1))
}

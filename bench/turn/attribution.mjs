#!/usr/bin/env node
// Where a daemon turn's main-thread CPU goes, by stage: `node bench/turn/attribution.mjs <main.cpuprofile>
// [turns=855] [worker.cpuprofile]` on the profiles `BENCH_CPU_PROF=<dir> pnpm bench turn` leaves (the
// daemon's main thread is the `…0.001.cpuprofile`, the journal's writer thread the `…1.002`; 855 turns
// is the full bench's count, 243 `--quick`'s). Bundled frames are mapped back to their sources with the
// daemon's `.js.map`s (`node:module` `SourceMap`); only the busy stretch of the profile counts (from the
// first to the last 500 ms bin at least half busy after start-up: the turns, not the idle floors). Each
// sample goes to the innermost of our own source frames on its stack (a library or Node frame called
// from ours is charged to our caller's stage); samples with none of ours on the stack are the Effect
// runtime (a fiber resumed from the event loop), GC, or library/Node code reached from a callback.
// Read-only; not in `pnpm bench --all` (no `index.ts`).
import { existsSync, readFileSync } from "node:fs"
import { SourceMap } from "node:module"
import { fileURLToPath } from "node:url"

const [mainFile, turnsArg, workerFile] = process.argv.slice(2)
if (!mainFile) {
  console.error("usage: node bench/turn/attribution.mjs <main.cpuprofile> [turns=855] [worker.cpuprofile]")
  process.exit(2)
}
const turns = Number(turnsArg ?? 855)

const maps = new Map()
const mapOf = (url) => {
  if (!maps.has(url)) {
    let map = null
    try {
      const path = url.startsWith("file://") ? fileURLToPath(url) : url
      if (path.endsWith(".js") && existsSync(`${path}.map`))
        map = new SourceMap(JSON.parse(readFileSync(`${path}.map`, "utf8")))
    } catch {}
    maps.set(url, map)
  }
  return maps.get(url)
}
const clean = (file) =>
  file
    .replace(/^.*?(node_modules\/\.pnpm\/[^/]+\/node_modules\/|packages\/)/, "")
    .replace(/^(\.\.\/)+/, "")
    .replace(/^file:\/\/.*\/packages\//, "")
const ours = (file) => /^(core|journal|transport-http|transport-grpc|daemon|plugins)\/src\//.test(file)

// Our source files (and the leaf frames under them) by the stage of a turn they serve.
const STAGES = [
  [
    "response write (SSE frames, socket writev)",
    /transport-http\/src\/(internal\/(tapeBody|sseFrames)|Sse)\.ts|fastRuns\.ts:uncork/
  ],
  ["HTTP parse + route + bearer auth", /transport-http\/src\/|core\/src\/kernel\/Auth\.ts/],
  ["journal hand-off to the writer thread (postMessage)", /journal\/src\/internal\/(writerClient|protocol)\.ts/],
  ["memory search before the model call", /MemoryStore\.ts|adapters\/memory\/Memory\.ts/],
  ["after-run work (learning, hooks)", /adapters\/memory\/|kernel\/RunHooks\.ts/],
  [
    "prompt assembly (history cache, context engine, attachments)",
    /adapters\/context\/|historyCache\.ts|PromptAssembler\.ts|kernel\/Attachments\.ts/
  ],
  [
    "commit prepare: redaction, canonical JSON, main-thread SQL reads",
    /journal\/src\/|domain\/(Redaction|Canonical)\.ts/
  ],
  [
    "model call: our adapter + the AI SDK provider under it",
    /adapters\/(ai-sdk|model)\/|adapters\/Models\.ts|ports\/ModelProvider\.ts/
  ],
  [
    "admission: Gateway, start gate, scheduler, Cedar",
    /kernel\/(Gateway|internal\/(startGate|startNow|scheduler|admission))\.ts|cedar\/|kernel\/Policy/
  ],
  [
    "loop + tape + followers (start, deltas, end)",
    /kernel\/(internal\/(loop|tape|hub|transition)|Follower|LiveTape)\.ts/
  ],
  ["metrics, spans, logs", /kernel\/Metrics\.ts|ports\/internal\/traced\.ts|Telemetry|Logger/],
  ["other of ours", /./]
]
const stageOfOurs = (file, name) => STAGES.find(([, re]) => re.test(`${file}:${name}`))[0]
const stageOfOthers = (file, name) => {
  if (name === "(garbage collector)") return "V8 garbage collection"
  if (name === "(program)") return "V8 (program)"
  if (/^effect\//.test(file)) return "Effect runtime, no frame of ours on the stack (fibers resumed)"
  if (name === "postMessage") return "journal hand-off to the writer thread (postMessage)"
  if (/@ai-sdk|zod|undici|webstreams|secure-json/.test(file))
    return "model call: the AI SDK provider, fetch, web streams"
  if (/^node:|^$/.test(file) || name === "writev" || name === "writeBuffer") return "Node: sockets, HTTP, timers"
  return "other libraries"
}

const attribute = (file, window) => {
  const p = JSON.parse(readFileSync(file, "utf8"))
  const nodes = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const origin = new Map()
  const originOf = (id) => {
    if (!origin.has(id)) {
      const f = nodes.get(id).callFrame
      let o = { file: clean(f.url), name: f.functionName || "(anonymous)" }
      const e = mapOf(f.url)?.findEntry(f.lineNumber, f.columnNumber)
      if (e?.originalSource) o = { file: clean(e.originalSource), name: o.name }
      origin.set(id, o)
    }
    return origin.get(id)
  }
  // The busy stretch: 500 ms bins at least half busy, first to last.
  const bins = new Map()
  let t = p.startTime
  const at = p.samples.map((id, i) => {
    t += p.timeDeltas[i] ?? 0
    const b = Math.floor((t - p.startTime) / 500_000)
    if (nodes.get(id).callFrame.functionName !== "(idle)") bins.set(b, (bins.get(b) ?? 0) + (p.timeDeltas[i] ?? 0))
    return b
  })
  // Start-up is all busy: the stretch begins after the first bin with some idle time in it.
  const startup = [...bins.keys()].sort((a, b) => a - b).find((b) => (bins.get(b) ?? 0) < 475_000) ?? 0
  const busyBins = [...bins].filter(([b, us]) => b > startup && us >= 250_000).map(([b]) => b)
  // The worker thread is never that busy: it takes the main thread's stretch (one clock for both).
  const [first, last] =
    window === undefined
      ? [Math.min(...busyBins), Math.max(...busyBins)]
      : [Math.floor((window[0] - p.startTime) / 500_000), Math.floor((window[1] - p.startTime) / 500_000)]
  const stages = new Map()
  const leaves = new Map()
  const files = new Map()
  let busy = 0
  p.samples.forEach((id, i) => {
    const f = nodes.get(id).callFrame
    if (f.functionName === "(idle)" || at[i] < first || at[i] > last) return
    const us = p.timeDeltas[i] ?? 0
    busy += us
    let cur = id
    let mine
    while (cur !== undefined && mine === undefined) {
      const o = originOf(cur)
      if (ours(o.file)) mine = o
      cur = parent.get(cur)
    }
    const leaf = originOf(id)
    const stage =
      mine === undefined
        ? stageOfOthers(leaf.file, f.functionName)
        : f.functionName === "postMessage"
          ? "journal hand-off to the writer thread (postMessage)"
          : stageOfOurs(mine.file, mine.name)
    stages.set(stage, (stages.get(stage) ?? 0) + us)
    if (mine !== undefined) files.set(mine.file, (files.get(mine.file) ?? 0) + us)
    const key = `${f.functionName || "(anonymous)"} ${leaf.file}`
    leaves.set(key, (leaves.get(key) ?? 0) + us)
  })
  return {
    busy,
    stages,
    leaves,
    files,
    seconds: ((last - first + 1) * 0.5).toFixed(1),
    window: [p.startTime + first * 500_000, p.startTime + last * 500_000]
  }
}

const show = (title, m, busy, n) => {
  console.log(`\n${title}`)
  console.log(`${"share".padStart(6)}  ${"µs/turn".padStart(8)}  what`)
  for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n))
    console.log(`${((100 * us) / busy).toFixed(1).padStart(5)}%  ${(us / turns).toFixed(0).padStart(8)}  ${k}`)
}
const main = attribute(mainFile)
show(
  `the daemon's main thread by stage (busy ${(main.busy / 1000).toFixed(0)} ms over ${main.seconds} s, ${turns} turns: ${(main.busy / turns).toFixed(0)} µs/turn)`,
  main.stages,
  main.busy,
  40
)
show("our source files (innermost of ours on the stack, with what they call)", main.files, main.busy, 25)
show("top frames, self time", main.leaves, main.busy, 25)
const out = { bench: "turn-attribution", turns, mainUsPerTurn: Math.round(main.busy / turns) }
if (workerFile) {
  const worker = attribute(workerFile, main.window)
  show(
    `the journal's writer thread (busy ${(worker.busy / 1000).toFixed(0)} ms: ${(worker.busy / turns).toFixed(0)} µs/turn)`,
    worker.leaves,
    worker.busy,
    12
  )
  out.workerUsPerTurn = Math.round(worker.busy / turns)
}
for (const [k, us] of main.stages) out[k] = Math.round(us / turns)
console.log(JSON.stringify(out))

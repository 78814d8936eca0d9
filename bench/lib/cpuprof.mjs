#!/usr/bin/env node
// Summarize a `node --cpu-prof` profile: busy time by component, then the top functions by self
// time. `node bench/lib/cpuprof.mjs <file.cpuprofile> [top=25]`. (Inclusive time is of little use
// here: Effect's fiber runtime breaks stacks at every async boundary.)
import { readFileSync } from "node:fs"

const [file, topArg] = process.argv.slice(2)
if (!file) {
  console.error("usage: node bench/lib/cpuprof.mjs <file.cpuprofile> [top]")
  process.exit(2)
}
const profile = JSON.parse(readFileSync(file, "utf8"))
const top = Number(topArg ?? 25)
const nodes = new Map(profile.nodes.map((n) => [n.id, n]))
const self = new Map()
profile.samples.forEach((id, i) => {
  self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
})

const component = ({ url, functionName: f }) => {
  if (f === "(idle)") return undefined
  if (f === "(garbage collector)") return "V8 garbage collection"
  if (/better-sqlite3/.test(url)) return "SQLite (better-sqlite3)"
  if (/node_modules\/effect\//.test(url)) return "Effect runtime"
  if (/@connectrpc|@bufbuild/.test(url)) return "connect-es + protobuf"
  if (/packages\/journal\//.test(url)) return "journal"
  if (/packages\/core\//.test(url)) return "core"
  if (/packages\/transport-/.test(url)) return "transports"
  if (/undici|webstreams/.test(url)) return "fetch + web streams"
  if (/node:internal\/(http|_http|net|stream)|node:_http|node:net/.test(url) || /^write/.test(f))
    return "node sockets/http"
  if (/modules|tsx|esbuild|source_map|bootstrap/.test(url) || /compile/i.test(f)) return "module loading"
  if (/daemon\/dist\/chunk-/.test(url)) return "daemon bundle (other chunks)"
  return "other"
}
const short = (url) => url.replace(/^.*node_modules\/\.pnpm\/[^/]+\/node_modules\//, "").replace(/^.*\/packages\//, "")
const byComponent = new Map()
const byFunction = new Map()
let busy = 0
for (const [id, t] of self) {
  const frame = nodes.get(id).callFrame
  const c = component(frame)
  if (c === undefined) continue
  busy += t
  byComponent.set(c, (byComponent.get(c) ?? 0) + t)
  const k = `${frame.functionName || "(anonymous)"} ${short(frame.url)}:${frame.lineNumber + 1}`
  byFunction.set(k, (byFunction.get(k) ?? 0) + t)
}
const show = (title, m, n) => {
  console.log(`${title} (busy ${(busy / 1000).toFixed(0)} ms)`)
  for (const [k, t] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n))
    console.log(`${((100 * t) / busy).toFixed(1).padStart(5)}%  ${k}`)
}
show("by component", byComponent, 20)
show("\ntop functions, self time", byFunction, top)

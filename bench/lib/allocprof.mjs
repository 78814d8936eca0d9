#!/usr/bin/env node
// Summarize a sampling heap profile (bench/lib/alloc-on-signal.mjs): bytes allocated by function
// (self) and by the function's file. `node bench/lib/allocprof.mjs <file.heapprofile> [top=30]`.
// Frames of a bundle with a `.map` beside it are reported by the bundle's position; map them with
// the bundle's source map when the file name is not enough.
import { readFileSync } from "node:fs"

const [file, topArg] = process.argv.slice(2)
if (!file) {
  console.error("usage: node bench/lib/allocprof.mjs <file.heapprofile> [top]")
  process.exit(2)
}
const profile = JSON.parse(readFileSync(file, "utf8"))
const top = Number(topArg ?? 30)
const bySize = new Map()
const byFile = new Map()
let total = 0
const short = (url) => url.replace(/^.*node_modules\/\.pnpm\/[^/]+\/node_modules\//, "").replace(/^.*\/packages\//, "")
const walk = (node) => {
  const f = node.callFrame
  const size = node.selfSize
  if (size > 0) {
    total += size
    const k = `${f.functionName || "(anonymous)"} ${short(f.url)}:${f.lineNumber + 1}`
    bySize.set(k, (bySize.get(k) ?? 0) + size)
    byFile.set(short(f.url) || "(native)", (byFile.get(short(f.url) || "(native)") ?? 0) + size)
  }
  for (const c of node.children ?? []) walk(c)
}
walk(profile.head)
const show = (title, m, n) => {
  console.log(`${title} (sampled ${(total / 1e6).toFixed(0)} MB)`)
  for (const [k, t] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n))
    console.log(`${((100 * t) / total).toFixed(1).padStart(5)}%  ${k}`)
}
show("by file", byFile, 20)
show("\nby function, self", bySize, top)

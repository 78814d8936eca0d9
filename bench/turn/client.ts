/**
 * bench/turn's client, in its own process: drives palyrad over HTTP and prints one JSON line.
 * A turn is timed from the request to the SSE frame carrying the run's final `RunStateChanged`.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { percentile } from "../lib/report.js"
import { streamTurn } from "./harness.js"

const [url, token, countsJson] = process.argv.slice(2) as [string, string, string]
const counts = JSON.parse(countsJson) as {
  plain: number
  tool: number
  sessions: number
  perSession: number
  rss: number
}

const turn = (text: string, sessionKey: string) => streamTurn(url, token, text, sessionKey)

const stats = (xs: Array<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return { p50: percentile(s, 50), p99: percentile(s, 99) }
}

// Warm up, then one client after another (latency).
for (let i = 0; i < 5; i++) await turn("hello", `warm-${i}`)
const plain: Array<number> = []
// BENCH_TURN_TRACE: each plain turn's start (wall clock) and length, to set beside the daemon's GCs.
const starts: Array<number> = []
for (let i = 0; i < counts.plain; i++) {
  starts.push(performance.timeOrigin + performance.now())
  plain.push(await turn("hello", `plain-${i % 10}`))
}
if (process.env.BENCH_TURN_TRACE)
  writeFileSync(
    join(process.env.BENCH_TURN_TRACE, "client.json"),
    JSON.stringify(starts.map((at, i) => ({ at, ms: plain[i] })))
  )
const tool: Array<number> = []
for (let i = 0; i < counts.tool; i++) tool.push(await turn("what time is it?", `tool-${i % 10}`))

// Throughput: N sessions, each sending its turns one after another, all at once.
const t0 = performance.now()
await Promise.all(
  Array.from({ length: counts.sessions }, async (_, s) => {
    for (let i = 0; i < counts.perSession; i++) await turn("hello", `load-${s}`)
  })
)
const turnsPerSec20 = (counts.sessions * counts.perSession) / ((performance.now() - t0) / 1000)

// Memory: one message in each of many fresh sessions (the daemon's RSS is read by the parent).
for (let i = 0; i < counts.rss; i += 20) {
  await Promise.all(Array.from({ length: Math.min(20, counts.rss - i) }, (_, k) => turn("hello", `rss-${i + k}`)))
}

// The second half of the plain turns alone: the daemon's JIT is still warming up over the first
// hundred or so (PERF-NOTES round 8), and this shows the turn once it has.
const steady = stats(plain.slice(Math.floor(plain.length / 2)))
console.log(JSON.stringify({ plain: stats(plain), steady, tool: stats(tool), turnsPerSec20 }))

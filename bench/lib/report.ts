import { readFileSync } from "node:fs"
/** Shared helpers for benchmarks: timing, percentiles, a plain table, and the final JSON line. */
export const quick = process.argv.includes("--quick")

export const percentile = (sorted: ReadonlyArray<number>, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[i]!
}

export const round = (n: number, digits = 2): number => {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

export const table = (title: string, rows: ReadonlyArray<Record<string, string | number>>) => {
  const first = rows[0]
  if (first === undefined) return
  const cols = Object.keys(first)
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c]).length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => c.padEnd(width[i]!)).join("  ")
  console.log(`\n${title}`)
  console.log(line(cols))
  console.log(line(width.map((w) => "-".repeat(w))))
  for (const r of rows) console.log(line(cols.map((c) => String(r[c]))))
}

/** The last line of every benchmark: one JSON object. */
export const result = (bench: string, figures: Record<string, number>) => {
  console.log(JSON.stringify({ bench, ...figures }))
}

/**
 * Event-loop delay probe: a 1 ms interval timer records how late each tick fires. Unlike
 * `monitorEventLoopDelay`, it also counts the gap still open when it stops, so a loop that was
 * starved for the whole measurement is reported as such instead of as "no samples".
 */
export const loopProbe = () => {
  const delays: Array<number> = []
  let last = performance.now()
  const timer = setInterval(() => {
    const now = performance.now()
    delays.push(Math.max(0, now - last - 1))
    last = now
  }, 1)
  return {
    stop: () => {
      clearInterval(timer)
      delays.push(Math.max(0, performance.now() - last - 1))
      const sorted = delays.sort((a, b) => a - b)
      return {
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        max: sorted.at(-1) ?? 0,
        samples: sorted.length
      }
    }
  }
}

/** Node flags that let `collectGarbage` force a full GC in a daemon the benchmark spawned. */
export const gcFlags = ["--expose-gc", "--import", new URL("./gc-on-signal.mjs", import.meta.url).href]

/** Force a full GC in a process started with `gcFlags`, then wait for it to settle. */
export const collectGarbage = async (pid: number) => {
  process.kill(pid, "SIGUSR2")
  await new Promise((r) => setTimeout(r, 500))
}

/**
 * The environment palyrad is run with, as the README's "Running palyrad as a service" recommends:
 * glibc's malloc limited to two arenas (each thread that allocates otherwise gets its own, and keeps
 * what it freed resident). The caller's own value wins.
 */
export const daemonEnv = (): Record<string, string> => ({ MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? "2" })

/** The node flags a built bin's shebang asks for (`#!/usr/bin/env -S node --flag …`), to spawn it the same way. */
export const shebangFlags = (bin: string): Array<string> => {
  const first = readFileSync(bin, "utf8").split("\n", 1)[0] ?? ""
  const m = /^#!.*\bnode((?:\s+--\S+)*)\s*$/.exec(first)
  return m?.[1]?.trim().split(/\s+/).filter(Boolean) ?? []
}

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

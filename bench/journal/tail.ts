/**
 * bench/journal/tail.ts: the latency distribution of lone appends (each waits for the previous, as a
 * turn's or a stream's commits do) through the default worker writer, with the writer's two WAL
 * checkpoint policies alternated in one sitting (PERF-NOTES round 12, slice A):
 * `node --conditions=@palyra/source --import tsx bench/journal/tail.ts [appends] [burst] [gapMs] [pairs]`
 * - `auto`: SQLite's automatic checkpoint at its default 1,000 frames, inside the commit that
 *   crosses it (the writer before round 12);
 * - `idle`: the writer's idle checkpoint past 1,000 frames (`IDLE_FRAMES=n`), the automatic one at
 *   10,000 (now).
 * Appends come in bursts of `burst` (default 6, a plain turn's commits), `gapMs` apart (default 1: the
 * client's next request). Prints each round's append latency p50/p99/p99.9/max, CPU per append (all
 * threads), and the share of appends slower than 2× the median; the last line is the JSON summary.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"
import { percentile, result, round, table } from "../lib/report.js"
import { event, sid } from "./events.js"

const appends = Number(process.argv[2] ?? 6000)
const burst = Number(process.argv[3] ?? 6)
const gapMs = Number(process.argv[4] ?? 1)
const pairs = Number(process.argv[5] ?? 3)
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-tail-"))

const policies = {
  auto: { idleFrames: 0, maxFrames: 1000 },
  idle: { idleFrames: Number(process.env.IDLE_FRAMES ?? 1000), maxFrames: 10_000 }
} as const
type Policy = keyof typeof policies

const sleep = (ms: number) => Effect.promise(() => new Promise((r) => setTimeout(r, ms)))

const measure = (policy: Policy, n: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const j = yield* SqliteJournal.make({
        filename: join(dir, `${policy}${n}.db`),
        writer: "worker",
        checkpoint: policies[policy]
      })
      yield* j.createSession(Records.makeSession({ id: sid(0) as never, principal: "b" }))
      for (let i = 0; i < 200; i++) yield* j.append(sid(0) as never, [event(sid(0), i)])
      const ms: Array<number> = []
      const cpu = process.cpuUsage()
      for (let i = 0; i < appends; i++) {
        if (i % burst === 0 && gapMs > 0) yield* sleep(gapMs)
        const t0 = performance.now()
        yield* j.append(sid(0) as never, [event(sid(0), i)])
        ms.push(performance.now() - t0)
      }
      const used = process.cpuUsage(cpu)
      const sorted = [...ms].sort((a, b) => a - b)
      const p50 = percentile(sorted, 50)
      return {
        policy,
        p50Ms: round(p50, 3),
        p99Ms: round(percentile(sorted, 99), 3),
        p999Ms: round(percentile(sorted, 99.9), 3),
        maxMs: round(sorted.at(-1) ?? 0, 2),
        over2xP50: round(ms.filter((m) => m > 2 * p50).length / ms.length, 4),
        cpuUsPerAppend: round((used.user + used.system) / appends, 1)
      }
    })
  )

const rows: Array<Effect.Effect.Success<ReturnType<typeof measure>>> = []
for (let p = 0; p < pairs; p++)
  for (const policy of ["auto", "idle"] as const) rows.push(await Effect.runPromise(measure(policy, p)))
rmSync(dir, { recursive: true, force: true })
table(`lone appends in bursts of ${burst}, ${gapMs} ms apart (${appends} per round)`, rows)
const mean = (policy: Policy, key: "p99Ms" | "p999Ms" | "maxMs" | "p50Ms" | "cpuUsPerAppend") => {
  const of = rows.filter((r) => r.policy === policy)
  return round(of.reduce((a, r) => a + r[key], 0) / of.length, 3)
}
result("journal-tail", {
  autoP50Ms: mean("auto", "p50Ms"),
  idleP50Ms: mean("idle", "p50Ms"),
  autoP99Ms: mean("auto", "p99Ms"),
  idleP99Ms: mean("idle", "p99Ms"),
  autoP999Ms: mean("auto", "p999Ms"),
  idleP999Ms: mean("idle", "p999Ms"),
  autoMaxMs: mean("auto", "maxMs"),
  idleMaxMs: mean("idle", "maxMs"),
  autoCpuUsPerAppend: mean("auto", "cpuUsPerAppend"),
  idleCpuUsPerAppend: mean("idle", "cpuUsPerAppend")
})

/**
 * bench/journal/lone.ts: appends that each wait for the previous one (one writer by default: the
 * shape of a streamed event or of a turn's commits, where every append is a round trip to the
 * writer thread on its own), with the worker writer:
 * `node --conditions=@palyra/source --import tsx bench/journal/lone.ts [appends] [writers] [rounds]`.
 * Prints, per round, the wall time per append (the round trip), the process's CPU per append (both
 * threads) and the main thread's.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"
import { round } from "../lib/report.js"
import { closedLoop, event, sid } from "./events.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-lone-"))
const appends = Number(process.argv[2] ?? 2000)
const writers = Number(process.argv[3] ?? 1)
const rounds = Number(process.argv[4] ?? 1)

const measure = (n: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const j = yield* SqliteJournal.make({ filename: join(dir, `l${n}.db`), writer: "worker" })
      for (let w = 0; w < writers; w++)
        yield* j.createSession(Records.makeSession({ id: sid(w) as never, principal: "b" }))
      for (let i = 0; i < 200; i++) yield* j.append(sid(0) as never, [event(sid(0), i)])
      const cpu = process.cpuUsage()
      const main = process.threadCpuUsage()
      const start = performance.now()
      yield* closedLoop(writers, appends, (w, i) => j.append(sid(w) as never, [event(sid(w), i)]))
      const elapsed = performance.now() - start
      const used = process.cpuUsage(cpu)
      const usedMain = process.threadCpuUsage(main)
      const total = appends * writers
      return {
        writers,
        wallUs: round((elapsed * 1000) / total, 1),
        cpuUs: round((used.user + used.system) / total, 1),
        mainCpuUs: round((usedMain.user + usedMain.system) / total, 1)
      }
    })
  )

for (let r = 0; r < rounds; r++) console.log(JSON.stringify(await Effect.runPromise(measure(r))))
rmSync(dir, { recursive: true, force: true })

import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Worker } from "node:worker_threads"
import { describe, expect, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"
import { sessionIdOf, userMessage } from "./fixtures/tape.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-writer-idle-"))
const sid = (i: number) => sessionIdOf(i, "01KB")
const message = userMessage

/** The writer thread's CPU (user + system) in ms, as the thread's own clock counts it. */
const threadCpuMs = (worker: Worker) =>
  Effect.promise(() => worker.cpuUsage()).pipe(Effect.map((u) => (u.user + u.system) / 1000))

describe("the writer thread at rest", () => {
  // Whatever the writer does to shorten a hand-off (polling a port, spinning on a shared counter),
  // nothing may keep running once the appends stop: an idle daemon's writer thread sleeps. The
  // thread's CPU clock over a real 1.5 s of quiet (after the idle checkpoints ran) stays near zero —
  // the bound is generous (10% of a core; this VM's CPU clocks count whole 4 ms ticks), a busy loop
  // reads ~1,500 ms.
  it.live(
    "uses next to no CPU while no append arrives, and answers the next one",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          let thread: Worker | undefined
          const j = yield* SqliteJournal.make({
            filename: join(dir, "idle.db"),
            writer: "worker",
            onWorker: (w) => {
              thread = w
            }
          })
          for (let w = 0; w < 32; w++) yield* j.createSession(Records.makeSession({ id: sid(w), principal: "p" }))
          // A burst of batches (32 concurrent writers), so any post-batch polling would be armed.
          yield* Effect.forEach(
            Array.from({ length: 32 * 40 }),
            (_, i) => j.append(sid(i % 32), [message(sid(i % 32), i)]),
            {
              concurrency: 32,
              discard: true
            }
          )
          const worker = thread!
          expect(worker).toBeDefined()
          // The quiet-time checkpoint (QUIET_MS after the last commit) and its fsync run first.
          yield* Effect.sleep("300 millis")
          const before = yield* threadCpuMs(worker)
          yield* Effect.sleep("1500 millis")
          const used = (yield* threadCpuMs(worker)) - before
          expect(used).toBeLessThan(150)
          // Still the writer: the next append is answered with the session's next seq.
          const stored = yield* j.append(sid(0), [message(sid(0), 99_999)])
          expect(stored.map((e) => e.tapeSeq)).toEqual([41])
        })
      ),
    20_000
  )
})

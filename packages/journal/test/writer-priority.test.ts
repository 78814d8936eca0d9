import { mkdtempSync, readdirSync, readFileSync } from "node:fs"
import { getPriority, tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"
import { lowerThisThread, WRITER_NICE_OFFSET, writerNiceOffset } from "../src/internal/threadPriority.js"
import { sessionIdOf } from "./fixtures/tape.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-writer-priority-"))
const sid = (i: number) => sessionIdOf(i, "01KC")

/** This process's threads, as the kernel lists them: id → name and nice value (`/proc/…/stat`). */
const threads = (): Map<string, { readonly name: string; readonly nice: number }> => {
  const out = new Map<string, { readonly name: string; readonly nice: number }>()
  for (const tid of readdirSync(`/proc/${process.pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${process.pid}/task/${tid}/stat`, "utf8")
      // "pid (name) state ppid …": the name may hold spaces; nice is the 17th field after it.
      const close = stat.lastIndexOf(")")
      const fields = stat.slice(close + 2).split(" ")
      out.set(tid, { name: stat.slice(stat.indexOf("(") + 1, close), nice: Number(fields[16]) })
    } catch {
      // A thread that ended between the listing and the read.
    }
  }
  return out
}

/** The nice values of the worker threads a journal opened with `env` as its writer's environment started. */
const writerNice = (env: string | undefined) =>
  Effect.scoped(
    Effect.gen(function* () {
      const before = new Set(threads().keys())
      const saved = process.env.PALYRA_JOURNAL_WRITER_NICE
      if (env === undefined) delete process.env.PALYRA_JOURNAL_WRITER_NICE
      else process.env.PALYRA_JOURNAL_WRITER_NICE = env
      const j = yield* SqliteJournal.make({
        filename: join(dir, `nice-${env ?? "default"}.db`),
        writer: "worker"
      }).pipe(
        Effect.ensuring(
          Effect.sync(() => {
            if (saved === undefined) delete process.env.PALYRA_JOURNAL_WRITER_NICE
            else process.env.PALYRA_JOURNAL_WRITER_NICE = saved
          })
        )
      )
      yield* j.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
      const stored = yield* j.append(sid(0), [
        { _tag: "UserMessage", sessionId: sid(0), runId: null, at: 1_700_000_000_000, text: "hi" }
      ])
      expect(stored.map((e) => e.tapeSeq)).toEqual([1])
      // The journal's writer is the one worker thread it started.
      return [...threads()].filter(([tid, t]) => !before.has(tid) && t.name === "WorkerThread").map(([, t]) => t.nice)
    })
  )

describe("the writer thread's priority", () => {
  // Measured reason in threadPriority.ts: a writer at its process's priority, woken for each batch,
  // preempts the main thread on a busy core; a few nice levels down it does not.
  // (Not where this process already runs at the lowest level: five levels down is the same level.)
  it.live.skipIf(process.platform !== "linux" || getPriority(0) >= 19)(
    "runs PALYRA_JOURNAL_WRITER_NICE levels below the thread that opened the journal (by default at its priority), and still commits",
    () =>
      Effect.gen(function* () {
        const own = getPriority(0)
        // Default: every thread the journal started runs at this thread's priority.
        const byDefault = yield* writerNice(undefined)
        expect(byDefault.length).toBeGreaterThan(0)
        expect(new Set(byDefault)).toEqual(new Set([Math.min(19, own + WRITER_NICE_OFFSET)]))
        // Asked for 5: exactly one of them (the writer) five levels down.
        const lowered = yield* writerNice("5")
        expect(lowered.filter((nice) => nice === Math.min(19, own + 5))).toHaveLength(1)
      })
  )

  it("takes its offset from PALYRA_JOURNAL_WRITER_NICE when that is a number, and does nothing off Linux", () => {
    expect(writerNiceOffset(undefined)).toBe(WRITER_NICE_OFFSET)
    expect(writerNiceOffset("")).toBe(WRITER_NICE_OFFSET)
    expect(writerNiceOffset("fast")).toBe(WRITER_NICE_OFFSET)
    expect(writerNiceOffset("0")).toBe(0)
    expect(writerNiceOffset("3")).toBe(3)
    expect(lowerThisThread(5, "darwin")).toBeUndefined()
    expect(lowerThisThread(0, "linux")).toBeUndefined()
    expect(lowerThisThread(Number.NaN, "linux")).toBeUndefined()
  })
})

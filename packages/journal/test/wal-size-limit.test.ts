import { mkdtempSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Duration, Effect, Schedule } from "effect"
import { SqliteJournal } from "../src/index.js"
import { walSizeLimit } from "../src/internal/walCheckpoint.js"
import { sessionIdOf, sessionNote } from "./fixtures/tape.js"
import { walFrames } from "./fixtures/wal.js"

// The WAL's size limit (`journal_size_limit`) is applied by the first commit after the WAL restarts,
// and the truncation took 4–16 ms inside that commit here, against ~1 ms for a restart without one
// (PERF-NOTES round 14, slice J). A restart needs every frame copied back, so between restarts the WAL
// grows well past the idle checkpoints' threshold: the limit (`walSizeLimit`) sits above the hard
// bound, so the writer's normal cycle never truncates, and a WAL a reader held past it is given back.

const dir = mkdtempSync(join(tmpdir(), "palyra-walsize-"))
const sid = (i: number) => sessionIdOf(i)
const note = (session: ReturnType<typeof sid>, i: number, size = 3000) => sessionNote(session, i, size)

/** Poll (10 ms apart, up to 10 s) until `done` holds. */
const eventually = (done: () => boolean) =>
  Effect.suspend(() => (done() ? Effect.void : Effect.fail("not yet" as const))).pipe(
    Effect.retry({ schedule: Schedule.spaced(Duration.millis(10)), times: 1000 })
  )

describe("the WAL's size limit", () => {
  for (const writer of ["worker", "inline"] as const) {
    it.live(
      `${writer}: a WAL of the default idle cycle's size is reused after it restarts, not truncated by a commit`,
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const filename = join(dir, `cycle-${writer}.db`)
            // The default policy's idle threshold (1,000 frames), a little past it: a WAL over 4 MiB.
            const idleFrames = 1_100
            const policy = { idleFrames, maxFrames: 10_000 }
            const j = yield* SqliteJournal.make({ filename, writer, checkpoint: policy })
            yield* j.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
            // Lone appends (the writer idle after each) until the idle checkpoint has copied the WAL
            // back whole: the next commit restarts it from its beginning.
            let i = 0
            while (walFrames(filename).max < idleFrames) yield* j.append(sid(0), [note(sid(0), i++)])
            yield* eventually(() => {
              const f = walFrames(filename)
              return f.max > 0 && f.backfilled === f.max
            })
            const grown = statSync(`${filename}-wal`).size
            expect(grown).toBeGreaterThan(4 * 1024 * 1024)
            expect(grown).toBeLessThanOrEqual(walSizeLimit(policy))
            // The checkpoint holds the WAL (its pin) until the file's fsync answered: a commit before
            // that appends to the WAL instead of restarting it. Append until a commit restarts it (its
            // last frame goes back to the start), each once everything is copied back again.
            for (;;) {
              const before = statSync(`${filename}-wal`).size
              yield* j.append(sid(0), [note(sid(0), i++)])
              if (walFrames(filename).max < 10) {
                // Restarted into the same file: the commit did not truncate it.
                expect(statSync(`${filename}-wal`).size).toBe(before)
                break
              }
              yield* eventually(() => {
                const f = walFrames(filename)
                return f.backfilled === f.max
              })
            }
            expect(yield* j.verify).toEqual({ ok: true, checked: i })
          })
        ),
      30_000
    )
  }

  it.live(
    "a WAL a reader held past the limit is cut back to it by the commit that restarts it",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const filename = join(dir, "held.db")
          const policy = { idleFrames: 64, maxFrames: 256 }
          const limit = walSizeLimit(policy)
          const j = yield* SqliteJournal.make({ filename, checkpoint: policy })
          yield* j.createSession(Records.makeSession({ id: sid(1), principal: "p" }))
          const big = (i: number) => note(sid(1), i, 20_000)
          let i = 0
          yield* j.append(sid(1), [big(i++)])
          // Another connection's read transaction: no checkpoint copies past its snapshot, so the
          // WAL cannot restart and grows past the limit.
          const reader = new Database(filename, { readonly: true })
          reader.prepare("BEGIN").run()
          reader.prepare("SELECT count(*) FROM tape_events").get()
          while (statSync(`${filename}-wal`).size <= limit + 1024 * 1024) {
            yield* j.append(sid(1), [big(i++), big(i++), big(i++), big(i++), big(i++), big(i++), big(i++), big(i++)])
          }
          reader.prepare("COMMIT").run()
          reader.close()
          for (;;) {
            yield* eventually(() => {
              const f = walFrames(filename)
              return f.backfilled === f.max
            })
            yield* j.append(sid(1), [big(i++)])
            if (walFrames(filename).max < 10) break
          }
          expect(statSync(`${filename}-wal`).size).toBeLessThanOrEqual(limit)
          expect(yield* j.verify).toEqual({ ok: true, checked: i })
        })
      ),
    30_000
  )
})

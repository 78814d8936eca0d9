import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import { Duration, Effect, Schedule } from "effect"
import { SqliteJournal } from "../src/index.js"
import { sessionIdOf, sessionNote } from "./fixtures/tape.js"
import { walFrames } from "./fixtures/wal.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-walcheckpoint-"))
const sid = (i: number) => sessionIdOf(i)
const note = (session: ReturnType<typeof sid>, i: number) => sessionNote(session, i)

/** Poll (10 ms apart, up to 5 s) until `done` holds. */
const eventually = (done: () => boolean) =>
  Effect.suspend(() => (done() ? Effect.void : Effect.fail("not yet" as const))).pipe(
    Effect.retry({ schedule: Schedule.spaced(Duration.millis(10)), times: 500 })
  )

describe("the writer's WAL checkpoints", () => {
  for (const writer of ["worker", "inline"] as const) {
    it.live(`${writer}: lone appends are copied back into the file when the writer is idle, never by a commit`, () =>
      Effect.scoped(
        Effect.gen(function* () {
          const filename = join(dir, `idle-${writer}.db`)
          // The automatic checkpoint out of reach: only the idle one can copy frames back.
          const j = yield* SqliteJournal.make({ filename, writer, checkpoint: { idleFrames: 64, maxFrames: 100_000 } })
          yield* j.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
          for (let i = 0; i < 150; i++) yield* j.append(sid(0), [note(sid(0), i)])
          const written = walFrames(filename)
          // SQLite's default would not have checkpointed yet (it waits for 1,000 frames)…
          expect(written.max).toBeGreaterThan(150)
          expect(written.max).toBeLessThan(1000)
          // …the idle writer did, once 64 frames were waiting (its fsyncs run off the thread, so wait).
          yield* eventually(() => walFrames(filename).backfilled >= 64)
          // Nothing it copied back is lost or out of order.
          expect(yield* j.verify).toEqual({ ok: true, checked: 150 })
          expect((yield* j.readTape(sid(0), { afterSeq: 0 })).map((e) => e.tapeSeq)).toEqual(
            Array.from({ length: 150 }, (_, i) => i + 1)
          )
        })
      )
    )
  }

  /** 8 writers × `each` appends, each writer awaiting its own (a batch always waiting or committing); the WAL's sizes seen after each. */
  const load = (j: SqliteJournal.Service, filename: string, each: number) =>
    Effect.gen(function* () {
      for (let w = 0; w < 8; w++) yield* j.createSession(Records.makeSession({ id: sid(w), principal: "p" }))
      const seen: Array<number> = []
      yield* Effect.forEach(
        Array.from({ length: 8 }, (_, w) => w),
        (w) =>
          Effect.forEach(
            Array.from({ length: each }, (_, i) => i),
            (i) =>
              Effect.tap(j.append(sid(w), [note(sid(w), i)]), () =>
                Effect.sync(() => seen.push(walFrames(filename).max))
              ),
            { discard: true }
          ),
        { concurrency: "unbounded", discard: true }
      )
      return seen
    })

  it.live(
    "the hard bound: a commit that takes the WAL past maxFrames checkpoints it (SQLite's own, in the commit)",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const filename = join(dir, "bound.db")
          const maxFrames = 150
          const j = yield* SqliteJournal.make({ filename, checkpoint: { idleFrames: 0, maxFrames } })
          const seen = yield* load(j, filename, 150)
          // ~1,200 appends wrote many times the bound; the WAL never held more than it plus one batch.
          expect(Math.max(...seen)).toBeGreaterThan(maxFrames / 2)
          expect(Math.max(...seen)).toBeLessThan(maxFrames + 100)
          expect(yield* j.verify).toEqual({ ok: true, checked: 8 * 150 })
        })
      )
  )

  it.live("under continuous load with idle checkpoints the WAL restarts, and is all copied back once quiet", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const filename = join(dir, "continuous.db")
        const j = yield* SqliteJournal.make({ filename, checkpoint: { idleFrames: 32, maxFrames: 150 } })
        const seen = yield* load(j, filename, 150)
        // The WAL started again from its beginning (its last frame went down) at least once.
        expect(seen.some((max, i) => i > 0 && max < seen[i - 1]!)).toBe(true)
        // Quiet (nothing committed for QUIET_MS): everything is copied back.
        yield* eventually(() => {
          const f = walFrames(filename)
          return f.max === f.backfilled
        })
        expect(yield* j.verify).toEqual({ ok: true, checked: 8 * 150 })
      })
    )
  )
})

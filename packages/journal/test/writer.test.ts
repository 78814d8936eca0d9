import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Errors, Records, type TapeEvent } from "@palyra/core"
import { Effect, Exit, Fiber, Scope } from "effect"
import { SqliteJournal } from "../src/index.js"
import { sessionIdOf, userMessage } from "./fixtures/tape.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-writer-"))
const sid = (i: number) => sessionIdOf(i)
const delta = userMessage

describe("group-commit writer (a callback, not a fiber)", () => {
  it.effect("appends from many fibers, more than one batch holds, commit gap-free in each session and verify", () =>
    Effect.gen(function* () {
      const filename = join(dir, "batches.db")
      const scope = yield* Scope.make()
      const j = yield* SqliteJournal.make({ filename, maxBatch: 4 }).pipe(Scope.extend(scope))
      for (let s = 0; s < 3; s++) yield* j.createSession(Records.makeSession({ id: sid(s), principal: "p" }))
      yield* Effect.forEach(
        Array.from({ length: 60 }, (_, i) => i),
        (i) => j.append(sid(i % 3), [delta(sid(i % 3), i)]),
        { concurrency: "unbounded", discard: true }
      )
      for (let s = 0; s < 3; s++) {
        const tape = yield* j.readTape(sid(s), { afterSeq: 0 })
        expect(tape.map((e) => e.tapeSeq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
        expect(yield* j.headSeq(sid(s))).toBe(20)
      }
      expect((yield* j.verify).ok).toBe(true)
      yield* Scope.close(scope, Exit.void)
    })
  )

  it.effect("appends still queued when the journal closes are committed; an append after close is refused", () =>
    Effect.gen(function* () {
      const filename = join(dir, "close.db")
      const scope = yield* Scope.make()
      const j = yield* SqliteJournal.make({ filename }).pipe(Scope.extend(scope))
      yield* j.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
      // Queued (the writer runs on the next turn of the event loop), then the scope closes at once.
      const pending: Array<Fiber.RuntimeFiber<ReadonlyArray<TapeEvent.TapeEvent>, unknown>> = []
      for (let i = 0; i < 10; i++) pending.push(yield* Effect.fork(j.append(sid(0), [delta(sid(0), i)])))
      yield* Effect.yieldNow()
      yield* Scope.close(scope, Exit.void)
      const stored = yield* Fiber.join(Fiber.all(pending))
      expect(stored.flat().map((e) => e.tapeSeq)).toEqual(Array.from({ length: 10 }, (_, i) => i + 1))
      const refused = yield* Effect.flip(j.append(sid(0), [delta(sid(0), 10)]))
      expect(refused).toBeInstanceOf(Errors.JournalError)

      const reopened = yield* Scope.make()
      const again = yield* SqliteJournal.make({ filename }).pipe(Scope.extend(reopened))
      expect((yield* again.readTape(sid(0), { afterSeq: 0 })).length).toBe(10)
      expect((yield* again.verify).ok).toBe(true)
      yield* Scope.close(reopened, Exit.void)
    })
  )
})

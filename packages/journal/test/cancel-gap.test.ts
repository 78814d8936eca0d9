/**
 * A run cancelled while its writes are committing: every event the journal holds reaches a live
 * follower (no gap in `tape_seq`), and the run ends `Cancelled` (its view never falls behind the
 * tape). Once a write is handed to the journal it commits whatever happens to the run's fiber, so
 * the tape's publication and the run's bookkeeping must not be skipped by the interruption — with
 * the writer in a worker thread the commit is in flight while the main thread handles the cancel.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Follower, Gateway, ScriptedModel, type TapeEvent } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-cancel-gap-"))
const op = Caller.operator("op")

/** Take from the follower until it has reached `seq` (or ended), with a real delay between empty takes. */
const takeUntil = (follower: Follower.Follower, seq: number) =>
  Effect.gen(function* () {
    const seen: Array<number> = []
    for (let i = 0; i < 500 && (seen.at(-1) ?? 0) < seq; i++) {
      const ready = follower.take()
      if (Array.isArray(ready)) for (const e of ready as ReadonlyArray<TapeEvent.TapeEvent>) seen.push(e.tapeSeq)
      else if (ready === Follower.Done || (ready !== undefined && Follower.isFailed(ready))) break
      else yield* Effect.sleep("10 millis")
    }
    return seen
  })

describe("a run cancelled while its writes commit", () => {
  for (const writer of ["worker", "inline"] as const) {
    it.live(`${writer} writer: live followers see every committed event, the run ends Cancelled`, () =>
      Effect.gen(function* () {
        // Every delta is its own write (no coalescing wait), paced so cancels land between and during writes.
        const model = ScriptedModel.make(() => ({ text: Array.from({ length: 400 }, (_, i) => `d${i} `) }))
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          for (let round = 0; round < 12; round++) {
            const started = yield* gateway.startRun(Caller.user("alice"), { key: `s${round}`, text: "go" })
            const sessionId = started.session.id
            const follower = yield* gateway.follow(op, sessionId, 0)
            yield* Effect.sleep(`${round % 4} millis`)
            yield* gateway.cancelRun(op, started.run.id).pipe(Effect.ignore)
            const ended = yield* gateway.awaitRun(op, started.run.id).pipe(Effect.timeout("20 seconds"))
            assert.include(["Cancelled", "Done"], ended.state)
            const stored = (yield* gateway.readTape(op, sessionId, { afterSeq: 0 })).map((e) => e.tapeSeq)
            assert.deepStrictEqual(
              stored,
              stored.map((_, i) => i + 1)
            )
            const seen = yield* takeUntil(follower, stored.at(-1) ?? 0)
            assert.deepStrictEqual(seen, stored)
          }
        }).pipe(
          Effect.provide(
            gatewayLayer({ model, journal: SqliteJournal.layer({ filename: join(dir, `${writer}.db`), writer }) })
          ),
          Effect.scoped
        )
      })
    )
  }
})

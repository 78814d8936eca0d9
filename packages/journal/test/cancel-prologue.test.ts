/**
 * A run cancelled in its loop's prologue (admitted and started in one commit, its history still
 * being read): the cancellation is recorded inside the run's own fiber, so the run is terminal
 * before the scheduler ends it — an `awaitRun` that waited before the cancel resolves, and the
 * session's next run starts only after the cancelled run's terminal event.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, Journal, ScriptedModel, type TapeEvent } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Deferred, Effect, Fiber, Layer, Schedule } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-cancel-prologue-"))
const alice = Caller.user("alice")
const startsRun = (events: ReadonlyArray<TapeEvent.NewTapeEvent>, effects: Journal.AppendEffects | undefined) =>
  effects?.createRun !== undefined && events.some((e) => e._tag === "UserMessage")

describe("a cancel in the run's prologue (SqliteJournal)", () => {
  it.live("is on the tape before the run ends: earlier waiters resolve, the next run starts after it", () =>
    Effect.gen(function* () {
      const inner = yield* SqliteJournal.make({ filename: join(dir, "prologue.db") })
      const reading = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      let heldNext = false
      const holdOnce = <A, E>(read: Effect.Effect<A, E>): Effect.Effect<A, E> => {
        if (!heldNext) return read
        heldNext = false
        return Deferred.succeed(reading, undefined).pipe(
          Effect.zipRight(Deferred.await(release)),
          Effect.zipRight(read)
        )
      }
      // The first history read after a run's start commit waits until released: the run is in its
      // prologue. Approvals are read slowly, widening the window between a cancel and its record.
      const journal: Journal.Service = {
        ...inner,
        append: (sessionId, events, effects) =>
          Effect.tap(inner.append(sessionId, events, effects), () =>
            Effect.sync(() => {
              if (startsRun(events, effects)) heldNext = true
            })
          ),
        // (The history cache holds the start commit, so the loop may read only the session's head.)
        readTape: (sessionId, options) => holdOnce(inner.readTape(sessionId, options)),
        headSeq: (sessionId) => holdOnce(inner.headSeq(sessionId)),
        listApprovals: (f) => Effect.zipRight(Effect.sleep("50 millis"), inner.listApprovals(f))
      }
      const model = ScriptedModel.make([{ text: "answer to b" }])
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const a = yield* gateway.sendMessage(alice, { text: "a", sessionId: session.id })
        yield* Deferred.await(reading)
        const waiting = yield* Effect.fork(gateway.awaitRun(alice, a.run.id))
        yield* Fiber.status(waiting).pipe(
          Effect.repeat({ schedule: Schedule.spaced("1 millis"), until: (s) => s._tag === "Suspended" })
        )
        const b = yield* gateway.sendMessage(alice, { text: "b", sessionId: session.id })
        const cancelled = yield* gateway.cancelRun(alice, a.run.id)
        assert.strictEqual(cancelled.state, "Cancelled")
        const awaited = yield* Fiber.join(waiting).pipe(Effect.timeout("5 seconds"))
        assert.strictEqual(awaited.state, "Cancelled")
        const done = yield* gateway.awaitRun(alice, b.run.id).pipe(Effect.timeout("5 seconds"))
        assert.strictEqual(done.state, "Done")

        const tape = yield* gateway.readTape(alice, session.id, { afterSeq: 0 })
        const endOfA = tape.findIndex(
          (e) => e.runId === a.run.id && e._tag === "RunStateChanged" && e.to === "Cancelled"
        )
        const startOfB = tape.findIndex(
          (e) => e.runId === b.run.id && e._tag === "RunStateChanged" && e.to === "InProgress"
        )
        assert.isTrue(endOfA >= 0 && startOfB > endOfA, "the next run started before the cancelled one ended")
        // The cancelled run called no model; the next run's prompt does not carry it as unanswered.
        assert.strictEqual(model.prompts.length, 1)
        assert.strictEqual(tape.filter((e) => e.runId === a.run.id && e._tag === "ModelRequest").length, 0)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
    }).pipe(Effect.scoped)
  )
})

/**
 * A run resumed at start-up while it waited for an approval, cancelled while its loop is still in
 * its prologue (reading its history): the cancellation closes its open work as the loop's own
 * cancellation does — the pending approval expires — and no tool runs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Option } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel } from "../src/index.js"
import { collect, gatewayLayer, tags } from "../src/testing.js"
import { pendingApproval, recordingTool } from "./helpers.js"

describe("a resumed run cancelled in its prologue", () => {
  it.live("expires its pending approval, runs no tool, and ends Cancelled", () =>
    Effect.gen(function* () {
      const journal = yield* MemoryJournal.make()
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const script = [{ toolCalls: [{ name: "fs.write", args: { x: 7 } }] }, { text: "after" }]
      const { runId, sessionId } = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write" })
        yield* Effect.fork(collect(events))
        yield* pendingApproval(gateway, run.id)
        return { runId: run.id, sessionId: run.sessionId }
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make(script),
            tools: [tool],
            journal: Layer.succeed(Journal.Journal, journal)
          })
        ),
        Effect.scoped
      )
      assert.strictEqual(Option.getOrThrow(yield* journal.getRun(runId)).state, "WaitingForApproval")

      // The next process: the resumed run's first history read waits until released.
      const reading = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      let holdNext = true
      const held: Journal.Service = {
        ...journal,
        readTape: (s, o) => {
          if (s !== sessionId || !holdNext) return journal.readTape(s, o)
          holdNext = false
          return Deferred.succeed(reading, undefined).pipe(
            Effect.zipRight(Deferred.await(release)),
            Effect.zipRight(journal.readTape(s, o))
          )
        }
      }
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        yield* Deferred.await(reading)
        const cancelled = yield* gateway.cancelRun(Caller.operator("op"), runId)
        assert.strictEqual(cancelled.state, "Cancelled")
        yield* Deferred.succeed(release, undefined)
        const pending = yield* gateway.listApprovals(Caller.operator("op"), { runId, status: "pending" })
        assert.strictEqual(pending.length, 0)
        const tape = tags(yield* journal.readTape(sessionId, { afterSeq: 0 }))
        assert.deepStrictEqual(tape.slice(-2), ["ApprovalResolved", "RunStateChanged"])
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make(script.slice(1)),
            tools: [tool],
            journal: Layer.succeed(Journal.Journal, held)
          })
        ),
        Effect.scoped
      )
      assert.deepStrictEqual(calls, [])
    })
  )
})

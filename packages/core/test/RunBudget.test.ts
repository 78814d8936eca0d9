/**
 * The run's wall-clock budget is one timer on the run's clock that interrupts the run's fiber: what
 * the run records must be what `Effect.timeoutFail` around the run gave — the `wallClock` failure
 * with its exact error and event, the running tool cut off (its fiber interrupted, its call closed),
 * a cancel still a cancel, and a run that ends in time untouched by a timer left behind.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema, TestClock } from "effect"
import { Caller, ScriptedModel, type TapeEvent, Tool } from "../src/index.js"
import { collect } from "../src/testing.js"
import { withGateway } from "./helpers.js"

type Ev = TapeEvent.TapeEvent
const only = <T extends Ev["_tag"]>(events: ReadonlyArray<Ev>, tag: T) =>
  events.filter((e): e is TapeEvent.TapeEventOf<T> => e._tag === tag)
const finalState = (events: ReadonlyArray<Ev>) => only(events, "RunStateChanged").at(-1)?.to

/** A tool that never finishes; `started` when it runs, `stopped` when its fiber is interrupted. */
const stuckTool = (started: Deferred.Deferred<void>, stopped: Deferred.Deferred<void>) =>
  Tool.make("stuck", {
    description: "never returns",
    parameters: Schema.Struct({}),
    risk: "low",
    timeout: "1 hour",
    execute: () =>
      Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
        Effect.onInterrupt(() => Deferred.succeed(stopped, undefined))
      )
  })

describe("the run's wall-clock budget", () => {
  it.effect("runs out while a tool runs: the tool is interrupted, its call closed, the run Failed with wallClock", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const stopped = yield* Deferred.make<void>()
      const model = ScriptedModel.make([{ toolCalls: [{ name: "stuck", args: {} }] }, { text: "never" }])
      yield* withGateway(
        { model, tools: [stuckTool(started, stopped)], budgets: { wallClock: "90 seconds" } },
        (gateway) =>
          Effect.gen(function* () {
            const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "x" })
            const fiber = yield* Effect.fork(collect(events))
            yield* Deferred.await(started)
            yield* TestClock.adjust("89 seconds")
            assert.strictEqual((yield* gateway.getRun(Caller.user("alice"), run.id)).state, "InProgress")
            yield* TestClock.adjust("2 seconds")
            const seen = yield* Fiber.join(fiber)
            yield* Deferred.await(stopped)
            assert.strictEqual(finalState(seen), "Failed")
            const [error] = only(seen, "RunError")
            assert.strictEqual(error!.code, "budget_exceeded")
            assert.include(error!.message, "wallClock")
            assert.include(error!.message, "90000")
            const [closed] = only(seen, "ToolResult")
            assert.strictEqual(closed!.status, "interrupted")
            const done = yield* gateway.getRun(Caller.user("alice"), run.id)
            assert.strictEqual(done.state, "Failed")
            assert.strictEqual(model.prompts.length, 1)
          })
      )
    })
  )

  it.effect("a cancel before the budget runs out is a cancel; a run that ends in time is not touched later", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const stopped = yield* Deferred.make<void>()
      const model = ScriptedModel.make([{ text: "quick" }, { toolCalls: [{ name: "stuck", args: {} }] }])
      yield* withGateway(
        { model, tools: [stuckTool(started, stopped)], budgets: { wallClock: "90 seconds" } },
        (gateway) =>
          Effect.gen(function* () {
            const alice = Caller.user("alice")
            const quick = yield* gateway.startRun(alice, { text: "a", key: "s" })
            assert.strictEqual(finalState(yield* collect(quick.events)), "Done")
            const slow = yield* gateway.startRun(alice, { text: "b", key: "s" })
            const fiber = yield* Effect.fork(collect(slow.events))
            yield* Deferred.await(started)
            yield* TestClock.adjust("30 seconds")
            yield* gateway.cancelRun(alice, slow.run.id)
            const seen = yield* Fiber.join(fiber)
            yield* Deferred.await(stopped)
            assert.strictEqual(finalState(seen), "Cancelled")
            assert.deepStrictEqual(only(seen, "RunError"), [])
            // Past both runs' budgets: neither changes (the first run's timer was stopped with it).
            yield* TestClock.adjust("5 minutes")
            assert.strictEqual((yield* gateway.getRun(alice, quick.run.id)).state, "Done")
            assert.strictEqual((yield* gateway.getRun(alice, slow.run.id)).state, "Cancelled")
            const tape = yield* gateway.readTape(alice, quick.run.sessionId, { afterSeq: 0 })
            assert.deepStrictEqual(only(tape, "RunError"), [])
          })
      )
    })
  )

  // On the live clock the timer is a plain `setTimeout` (no fiber per run): the same failure, and a
  // run that ends in time leaves no timer behind that could touch it later.
  it.live(
    "on the live clock: runs out while a tool runs (Failed with wallClock); a run that ended in time stays Done",
    () =>
      Effect.gen(function* () {
        const started = yield* Deferred.make<void>()
        const stopped = yield* Deferred.make<void>()
        const model = ScriptedModel.make([
          { text: "quick" },
          { toolCalls: [{ name: "stuck", args: {} }] },
          { text: "never" }
        ])
        yield* withGateway(
          { model, tools: [stuckTool(started, stopped)], budgets: { wallClock: "300 millis" } },
          (gateway) =>
            Effect.gen(function* () {
              const alice = Caller.user("alice")
              const quick = yield* gateway.startRun(alice, { text: "a", key: "s" })
              assert.strictEqual(finalState(yield* collect(quick.events)), "Done")
              const slow = yield* gateway.startRun(alice, { text: "b", key: "s" })
              const seen = yield* collect(slow.events)
              yield* Deferred.await(stopped)
              assert.isTrue(yield* Deferred.isDone(started))
              assert.strictEqual(finalState(seen), "Failed")
              const [error] = only(seen, "RunError")
              assert.strictEqual(error!.code, "budget_exceeded")
              assert.include(error!.message, "wallClock")
              assert.include(error!.message, "300")
              assert.strictEqual(only(seen, "ToolResult")[0]!.status, "interrupted")
              // Past the first run's budget (it ended long before): still Done, nothing written for it.
              yield* Effect.sleep("400 millis")
              assert.strictEqual((yield* gateway.getRun(alice, quick.run.id)).state, "Done")
              const tape = yield* gateway.readTape(alice, quick.run.sessionId, { afterSeq: 0 })
              assert.deepStrictEqual(
                only(tape, "RunError").map((e) => e.runId),
                [slow.run.id]
              )
            })
        )
      })
  )
})

/**
 * A run's start commits with its admission; its first model request is written only with the call's
 * first output. A crash while the model is thinking therefore leaves a tape that ends at the start —
 * and under `onInterruptedRuns: "fail"` the next process must fail that run, never call the model again.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Option, Stream } from "effect"
import { Caller, Errors, Gateway, Journal, MemoryJournal, type ModelProvider, ScriptedModel } from "../src/index.js"
import { gatewayLayer, tags } from "../src/testing.js"

const alice = Caller.user("alice")

describe("recovery of a run that crashed in its first model call", () => {
  it.live('onInterruptedRuns "fail": the run is failed and the model is not called again', () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      let dead = false
      let firstCalls = 0
      const called = yield* Deferred.make<void>()
      // The request went out and nothing came back yet; the process dies there (no more writes).
      const thinking: ModelProvider.Service = {
        name: "slow:model",
        stream: () =>
          Stream.fromEffect(
            Effect.sync(() => {
              firstCalls++
              dead = true
            }).pipe(Effect.zipRight(Deferred.succeed(called, undefined)), Effect.zipRight(Effect.never))
          )
      }
      const dying: Journal.Service = {
        ...inner,
        append: (s, e, f) =>
          dead
            ? Effect.fail(new Errors.JournalError({ method: "append", message: "the process died" }))
            : inner.append(s, e, f)
      }
      const started = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run } = yield* gateway.sendMessage(alice, { text: "hi", key: "k" })
        yield* Deferred.await(called)
        return run
      }).pipe(
        Effect.provide(gatewayLayer({ model: thinking, journal: Layer.succeed(Journal.Journal, dying) })),
        Effect.scoped
      )
      // What the crash left: the admission and the start, nothing of the model call.
      assert.deepStrictEqual(tags(yield* inner.readTape(started.sessionId, { afterSeq: 0 })), [
        "RunAccepted",
        "RunStateChanged",
        "UserMessage",
        "RunStateChanged"
      ])
      assert.strictEqual(Option.getOrThrow(yield* inner.getRun(started.id)).state, "InProgress")

      const next = ScriptedModel.make([{ text: "again" }])
      const run = yield* Effect.flatMap(Gateway.Gateway, (gateway) => gateway.awaitRun(alice, started.id)).pipe(
        Effect.provide(
          gatewayLayer({ model: next, journal: Layer.succeed(Journal.Journal, inner), onInterruptedRuns: "fail" })
        ),
        Effect.scoped
      )
      assert.strictEqual(run.state, "Failed")
      assert.strictEqual(run.error?.code, "interrupted")
      assert.strictEqual(firstCalls + next.prompts.length, 1)
    })
  )
})

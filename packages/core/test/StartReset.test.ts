/**
 * A session reset that commits while a message is being admitted (after admission read the session,
 * before the run's start commit): the run, admitted and started in one commit, still sees the reset
 * — its prompt holds none of the conversation the reset dropped.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const alice = Caller.user("alice")

describe("a reset during admission", () => {
  it.live("is honoured by the run admitted with its start", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const admitting = yield* Deferred.make<void>()
      const go = yield* Deferred.make<void>()
      let hold = false
      // Admission reads the session's head before its commit: held there once, while the reset commits.
      const journal: Journal.Service = {
        ...inner,
        headSeq: (sessionId) =>
          hold
            ? Effect.sync(() => {
                hold = false
              }).pipe(
                Effect.zipRight(Deferred.succeed(admitting, undefined)),
                Effect.zipRight(Deferred.await(go)),
                Effect.zipRight(inner.headSeq(sessionId))
              )
            : inner.headSeq(sessionId)
      }
      const model = ScriptedModel.make([{ text: "first answer" }, { text: "second answer" }])
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const first = yield* gateway.sendMessage(alice, { text: "OLD-CONVERSATION", sessionId: session.id })
        yield* gateway.awaitRun(alice, first.run.id)
        hold = true
        const sending = yield* Effect.fork(gateway.sendMessage(alice, { text: "after reset", sessionId: session.id }))
        yield* Deferred.await(admitting)
        const reset = yield* gateway.resetSession(alice, session.id)
        yield* Deferred.succeed(go, undefined)
        const { run } = yield* Fiber.join(sending)
        assert.isTrue(run.startSeq > reset.historyFromSeq)
        assert.strictEqual((yield* gateway.awaitRun(alice, run.id)).state, "Done")
        assert.strictEqual(model.prompts.length, 2)
        const prompt = JSON.stringify(model.prompts[1])
        assert.isTrue(prompt.includes("after reset"))
        assert.isFalse(prompt.includes("OLD-CONVERSATION"), "the run's prompt has the history the reset dropped")
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
    })
  )
})

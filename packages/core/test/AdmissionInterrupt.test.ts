import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import type { RunId } from "../src/domain/Ids.js"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const alice = Caller.user("alice")

// A caller that goes away (a client disconnect interrupts its request) right after its run's
// admission committed: the admitted run is still queued and driven to its end, and the session
// takes later runs as usual (it used to stay `Accepted` with nothing driving it).
describe("admission interrupted after its commit", () => {
  it.live("the admitted run still runs to its end", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const committed = yield* Deferred.make<RunId>()
      const journal: Journal.Service = {
        ...inner,
        append: (sessionId, events, effects) =>
          effects?.createRun === undefined
            ? inner.append(sessionId, events, effects)
            : Effect.gen(function* () {
                const stored = yield* inner.append(sessionId, events, effects)
                // The commit is done; the caller is interrupted while its append still returns.
                yield* Deferred.succeed(committed, effects.createRun!.id)
                yield* Effect.sleep("30 millis")
                return stored
              })
      }
      const model = ScriptedModel.make([{ text: "one" }, { text: "two" }])
      const out = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const send = yield* Effect.fork(gateway.sendMessage(alice, { text: "a", sessionId: session.id }))
        const runId = yield* Deferred.await(committed)
        yield* Fiber.interrupt(send)
        const first = yield* gateway.awaitRun(alice, runId).pipe(Effect.timeout("10 seconds"))
        const next = yield* gateway.sendMessage(alice, { text: "b", sessionId: session.id })
        const second = yield* gateway.awaitRun(alice, next.run.id).pipe(Effect.timeout("10 seconds"))
        return { first, second }
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
      assert.strictEqual(out.first.state, "Done")
      assert.strictEqual(out.second.state, "Done")
    })
  )
})

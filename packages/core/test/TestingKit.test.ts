/**
 * `@palyra/core/testing`'s helpers for streamed-start tests, on the real kernel (in-memory journal,
 * scripted model): `holdStartRunFollowing` holds the call's answer until the test's `afterStart`
 * completes and can fail it after its commit; `tapeSubscribers` reads the live followers; `eventually`
 * polls until its condition holds; `gate` releases on demand or by itself.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer } from "effect"
import { Caller, Errors, Gateway, ScriptedModel } from "../src/index.js"
import { eventually, gate, gatewayLayer, holdStartRunFollowing, tapeSubscribers } from "../src/testing.js"

const alice = Caller.user("alice")

describe("the streamed-start test kit", () => {
  it.live("holdStartRunFollowing answers only once afterStart lets it, then counts the answer", () => {
    const held = holdStartRunFollowing()
    const layer = Layer.provideMerge(held.layer, gatewayLayer({ model: ScriptedModel.make(() => ({ text: "hi" })) }))
    return Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const g = gate()
      let seen: string | undefined
      held.afterStart = (started) =>
        Effect.zipRight(
          Effect.sync(() => (seen = started.run.id)),
          g.wait()
        )
      const call = yield* Effect.fork(Effect.scoped(gateway.startRunFollowing(alice, { text: "hi", key: "k" })))
      yield* Effect.sleep("50 millis")
      assert.strictEqual(held.returned, 0)
      assert.isDefined(seen)
      assert.isTrue((yield* tapeSubscribers) >= 1)
      g.release()
      const started = yield* Fiber.join(call)
      assert.strictEqual(started.run.id, seen)
      assert.strictEqual(held.returned, 1)
      // Failed after its commit: the run was admitted, the call answers the test's error.
      held.afterStart = () => Effect.fail(new Errors.Conflict({ message: "test" }))
      const failed = yield* Effect.exit(Effect.scoped(gateway.startRunFollowing(alice, { text: "again", key: "k2" })))
      assert.isTrue(Exit.isFailure(failed))
      assert.strictEqual(held.returned, 1)
    }).pipe(Effect.provide(layer))
  })

  it.live("eventually reads until its condition holds, a real delay apart; the last value otherwise", () =>
    Effect.promise(async () => {
      let n = 0
      const start = Date.now()
      assert.strictEqual(
        await eventually(
          async () => ++n,
          (v) => v === 3
        ),
        3
      )
      assert.isAtLeast(Date.now() - start, 30)
      assert.strictEqual(
        await eventually(
          async () => 7,
          (v) => v === 0,
          { attempts: 2, intervalMs: 1 }
        ),
        7
      )
    })
  )

  it.live("gate releases itself after its time when no one releases it", () =>
    Effect.gen(function* () {
      const start = Date.now()
      yield* gate(30).wait()
      assert.isAtLeast(Date.now() - start, 25)
    })
  )
})

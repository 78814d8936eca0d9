/**
 * At shutdown every running run is stopped at once, not one after another: four sessions' runs,
 * each inside a tool whose interruption takes a while, all start stopping before any has finished
 * stopping. (Runs started on their admission's claim are forked into a scope that closes its
 * fibers in parallel; a plain scope's finalizers run in sequence, which made shutdown take the sum
 * of every run's stop.)
 */
import { assert, it } from "@effect/vitest"
import { Deferred, Effect, Schema } from "effect"
import { Caller, Gateway, ScriptedModel, Tool } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const N = 4

it.live("shutdown stops every running run together", () =>
  Effect.gen(function* () {
    let running = 0
    let stopping = 0
    let stopped = 0
    const allRunning = yield* Deferred.make<void>()
    const allStopping = yield* Deferred.make<void>()
    // How many had started stopping when the first one finished stopping.
    let stoppingWhenFirstStopped = 0
    const tool = Tool.make("slow.stop", {
      description: "slow to stop",
      parameters: Schema.Struct({}),
      risk: "low",
      timeout: "1 hour",
      execute: () =>
        Effect.zipRight(
          Effect.sync(() => {
            if (++running === N) Deferred.unsafeDone(allRunning, Effect.void)
          }),
          Effect.never.pipe(
            Effect.onInterrupt(() =>
              Effect.gen(function* () {
                if (++stopping === N) yield* Deferred.succeed(allStopping, undefined)
                // Stopping takes until every run has begun to stop — or forever, if they stop in turn
                // (bounded here so a failing run ends: the assertion below names it).
                yield* Deferred.await(allStopping).pipe(
                  Effect.interruptible,
                  Effect.timeout("2 seconds"),
                  Effect.ignore
                )
                if (stopped++ === 0) stoppingWhenFirstStopped = stopping
              })
            )
          )
        )
    })
    const model = ScriptedModel.make(() => ({ toolCalls: [{ name: "slow.stop" }] }))
    yield* Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      for (let i = 0; i < N; i++) yield* gateway.sendMessage(Caller.user("alice"), { text: `hi ${i}`, key: `k${i}` })
      yield* Deferred.await(allRunning)
    }).pipe(Effect.provide(gatewayLayer({ model, tools: [tool] })), Effect.scoped)
    assert.strictEqual(stopped, N)
    assert.strictEqual(stoppingWhenFirstStopped, N)
  })
)

/**
 * At shutdown every running run is stopped at once, not one after another: runs inside a tool whose
 * interruption takes a while all start stopping before any has finished stopping — runs started on
 * their admission's claim (forked into a scope that closes its fibers in parallel; a plain scope's
 * finalizers run in sequence, which made shutdown take the sum of every run's stop) and runs a
 * session's worker launched (a run queued behind another), together.
 */
import { assert, it } from "@effect/vitest"
import { Deferred, Effect, Schema } from "effect"
import { Caller, Gateway, ScriptedModel, Tool } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

/** Start `n` runs that end up inside `slow.stop` (`start`), shut down, and see how they stopped. */
const shutdownOf = (n: number, start: (gateway: Gateway.Service) => Effect.Effect<unknown, unknown>) =>
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
            if (++running === n) Deferred.unsafeDone(allRunning, Effect.void)
          }),
          Effect.never.pipe(
            Effect.onInterrupt(() =>
              Effect.gen(function* () {
                if (++stopping === n) yield* Deferred.succeed(allStopping, undefined)
                // Stopping takes until every run has begun to stop — or 2 s, if they stop in turn.
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
    // "first" streams slowly (a run the next message of its session queues behind); others call the tool.
    const model = ScriptedModel.make((request) => {
      const last = request.messages.at(-1)
      return last?.role === "user" && last.text === "first"
        ? { text: ["a", "b"], delayPerDelta: "200 millis" }
        : { toolCalls: [{ name: "slow.stop" }] }
    })
    yield* Effect.gen(function* () {
      yield* start(yield* Gateway.Gateway)
      yield* Deferred.await(allRunning)
    }).pipe(Effect.provide(gatewayLayer({ model, tools: [tool] })), Effect.scoped)
    return { stopped, stoppingWhenFirstStopped }
  })

const alice = Caller.user("alice")

it.live("shutdown stops every running run together: four claimed runs", () =>
  Effect.gen(function* () {
    const seen = yield* shutdownOf(4, (gateway) =>
      Effect.forEach([0, 1, 2, 3], (i) => gateway.sendMessage(alice, { text: `hi ${i}`, key: `k${i}` }))
    )
    assert.deepStrictEqual(seen, { stopped: 4, stoppingWhenFirstStopped: 4 })
  })
)

it.live("shutdown stops every running run together: a claimed run and one its session's worker launched", () =>
  Effect.gen(function* () {
    const seen = yield* shutdownOf(2, (gateway) =>
      Effect.gen(function* () {
        yield* gateway.sendMessage(alice, { text: "first", key: "q" })
        // Queued behind "first": the session's worker launches it.
        yield* gateway.sendMessage(alice, { text: "second", key: "q" })
        // Claimed on an idle session.
        yield* gateway.sendMessage(alice, { text: "other", key: "r" })
      })
    )
    assert.deepStrictEqual(seen, { stopped: 2, stoppingWhenFirstStopped: 2 })
  })
)

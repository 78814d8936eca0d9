/**
 * The run-start gate (`maxConcurrentStarts`): a burst of starts does its start work (admission, the
 * run's `Start` transition) at most N at a time, the rest wait their turn and then run; runs past
 * their start are not held by it; nothing deadlocks when every permit is taken.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schedule } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel } from "../src/index.js"
import { makeStartGate } from "../src/kernel/internal/startGate.js"
import { collect, gapFree, gatewayLayer } from "../src/testing.js"

/** A memory journal whose session creations wait for `release`, counting those in flight. */
const holdingJournal = (release: Deferred.Deferred<void>) => {
  const seen = { inFlight: 0, maxInFlight: 0, created: 0 }
  const layer = Layer.effect(
    Journal.Journal,
    Effect.map(Journal.Journal, (inner) => ({
      ...inner,
      createSession: (session) =>
        Effect.gen(function* () {
          seen.created++
          seen.inFlight++
          seen.maxInFlight = Math.max(seen.maxInFlight, seen.inFlight)
          yield* Deferred.await(release)
          seen.inFlight--
          return yield* inner.createSession(session)
        })
    }))
  ).pipe(Layer.provide(MemoryJournal.layer()))
  return { seen, layer }
}

describe("the run-start gate", () => {
  it.live("lets at most N effects through at once, in turn, and all of them finish", () =>
    Effect.gen(function* () {
      const gate = makeStartGate(2)
      const latch = yield* Deferred.make<void>()
      let inside = 0
      let most = 0
      const fibers = yield* Effect.forEach(Array.from({ length: 6 }), () =>
        Effect.fork(
          gate(
            Effect.gen(function* () {
              inside++
              most = Math.max(most, inside)
              yield* Deferred.await(latch)
              inside--
            })
          )
        )
      )
      // Wait (real delay) until two are inside; the other four queue.
      yield* Effect.sync(() => inside).pipe(
        Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n === 2 })
      )
      yield* Effect.sleep("20 millis")
      assert.strictEqual(inside, 2)
      yield* Deferred.succeed(latch, undefined)
      yield* Effect.forEach(fibers, Fiber.join)
      assert.strictEqual(most, 2)
      assert.strictEqual(inside, 0)
    })
  )

  it.effect("no limit (Infinity) passes effects straight through", () =>
    Effect.gen(function* () {
      const gate = makeStartGate(Number.POSITIVE_INFINITY)
      const effect = Effect.succeed(1)
      assert.strictEqual(gate(effect), effect)
      assert.strictEqual(yield* gate(effect), 1)
    })
  )

  it.live("a burst of starts admits one session at a time with maxConcurrentStarts 1, then every run finishes", () =>
    Effect.gen(function* () {
      const release = yield* Deferred.make<void>()
      const { seen, layer } = holdingJournal(release)
      const model = ScriptedModel.make(() => ({ text: ["a", "b"] }))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const caller = Caller.user("alice")
        const starts = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => i),
          (i) => Effect.fork(gateway.startRun(caller, { text: "hi", key: `k${i}` })),
          { concurrency: "unbounded" }
        )
        // The first admission holds the only permit (its session creation waits): the others queue.
        yield* Effect.sync(() => seen.created).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n === 1 })
        )
        yield* Effect.sleep("30 millis")
        assert.strictEqual(seen.created, 1)
        yield* Deferred.succeed(release, undefined)
        const started = yield* Effect.forEach(starts, Fiber.join)
        for (const s of started) {
          const events = yield* collect(s.events)
          assert.strictEqual(gapFree(events, s.run.startSeq), undefined)
          const last = events.at(-1)
          assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Done")
        }
        assert.strictEqual(seen.maxInFlight, 1)
        assert.strictEqual(seen.created, 8)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: layer, maxConcurrentStarts: 1 })), Effect.scoped)
    })
  )

  it.live("by default starts overlap up to the limit, not beyond", () =>
    Effect.gen(function* () {
      const release = yield* Deferred.make<void>()
      const { seen, layer } = holdingJournal(release)
      const model = ScriptedModel.make(() => ({ text: "ok" }))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const caller = Caller.user("bob")
        const starts = yield* Effect.forEach(
          Array.from({ length: 10 }, (_, i) => i),
          (i) => Effect.fork(gateway.startRun(caller, { text: "hi", key: `k${i}` })),
          { concurrency: "unbounded" }
        )
        yield* Effect.sync(() => seen.inFlight).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n === 4 })
        )
        yield* Effect.sleep("30 millis")
        assert.strictEqual(seen.inFlight, 4)
        yield* Deferred.succeed(release, undefined)
        const started = yield* Effect.forEach(starts, Fiber.join)
        for (const s of started) {
          const events = yield* collect(s.events)
          assert.strictEqual(events.at(-1)?._tag, "RunStateChanged")
        }
        assert.strictEqual(seen.maxInFlight, 4)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: layer })), Effect.scoped)
    })
  )
})

/**
 * The run-start gate (`maxConcurrentStarts`): beyond N starts at once, start work runs at most N
 * steps per event-loop turn, so other work (I/O, deliveries) gets in between; the starts still all
 * proceed concurrently (a held start does not block the others) and every run finishes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schedule } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel } from "../src/index.js"
import { makeStartGate, turnScheduler } from "../src/kernel/internal/startGate.js"
import { collect, gapFree, gatewayLayer } from "../src/testing.js"

/**
 * A memory journal whose session creations (a new session is created in its first run's start
 * commit) wait for `release`, counting those in flight.
 */
const holdingJournal = (release: Deferred.Deferred<void>) => {
  const seen = { inFlight: 0, created: 0 }
  const layer = Layer.effect(
    Journal.Journal,
    Effect.map(Journal.Journal, (inner) => ({
      ...inner,
      append: (sessionId, events, effects) =>
        effects?.createSession === undefined
          ? inner.append(sessionId, events, effects)
          : Effect.gen(function* () {
              seen.created++
              seen.inFlight++
              yield* Deferred.await(release)
              seen.inFlight--
              return yield* inner.append(sessionId, events, effects)
            })
    }))
  ).pipe(Layer.provide(MemoryJournal.layer()))
  return { seen, layer }
}

describe("the run-start gate", () => {
  it("its scheduler runs at most N tasks per event-loop turn, letting other immediates in between", async () => {
    const scheduler = turnScheduler(2)
    let ran = 0
    for (let i = 0; i < 9; i++) scheduler.scheduleTask(() => ran++, 0)
    // Another callback of the same phase, re-armed each turn, sees how many tasks ran before it.
    const seen: Array<number> = []
    await new Promise<void>((resolve) => {
      const probe = () => {
        seen.push(ran)
        if (ran < 9) setImmediate(probe)
        else resolve()
      }
      setImmediate(probe)
    })
    assert.deepStrictEqual(seen, [2, 4, 6, 8, 9])
  })

  it.live("starts beyond the limit are deferred but all finish, in no particular order of admission", () =>
    Effect.gen(function* () {
      const gate = makeStartGate(2)
      const latch = yield* Deferred.make<void>()
      let inside = 0
      const fibers = yield* Effect.forEach(Array.from({ length: 6 }), () =>
        Effect.fork(
          gate(
            Effect.zipRight(
              Effect.sync(() => inside++),
              Deferred.await(latch)
            )
          )
        )
      )
      yield* Effect.sync(() => inside).pipe(
        Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n === 6 })
      )
      yield* Deferred.succeed(latch, undefined)
      yield* Effect.forEach(fibers, Fiber.join)
      assert.strictEqual(inside, 6)
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

  it.live("with maxConcurrentStarts 1 a held start does not block the others, and every run finishes gap-free", () =>
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
        // Every admission reaches its session creation while the first is still held.
        yield* Effect.sync(() => seen.inFlight).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n === 8 })
        )
        yield* Deferred.succeed(release, undefined)
        const started = yield* Effect.forEach(starts, Fiber.join)
        for (const s of started) {
          const events = yield* collect(s.events)
          assert.strictEqual(gapFree(events, s.run.startSeq), undefined)
          const last = events.at(-1)
          assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Done")
        }
        assert.strictEqual(seen.created, 8)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: layer, maxConcurrentStarts: 1 })), Effect.scoped)
    })
  )
})

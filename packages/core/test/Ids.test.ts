import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, FastCheck as fc, Random, Schema, TestClock } from "effect"
import { Caller, Ids, ScriptedModel } from "../src/index.js"
import { withGateway } from "./helpers.js"

/** A clock that reads whatever time the test sets, backwards included. */
const manualClock = (start: number) => {
  let now = start
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => now,
    currentTimeMillis: Effect.sync(() => now),
    unsafeCurrentTimeNanos: () => BigInt(now) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(now) * 1_000_000n),
    sleep: () => Effect.void
  }
  return {
    clock,
    set: (time: number) => {
      now = time
    }
  }
}

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
const timeOf = (id: string) => [...id.slice(0, 10)].reduce((t, c) => t * 32 + CROCKFORD.indexOf(c), 0)

const isSorted = (ids: ReadonlyArray<string>) => ids.every((id, i) => i === 0 || ids[i - 1]! < id)

describe("ULIDs are monotonic", () => {
  it.effect.prop(
    "10,000 ids made in the same millisecond sort in generation order",
    [fc.integer({ min: 0, max: 2 ** 47 }), fc.integer()],
    ([time, seed]) =>
      Effect.gen(function* () {
        const { clock } = manualClock(time)
        const ids = yield* Effect.replicateEffect(Ids.ulid, 10_000).pipe(
          Effect.withClock(clock),
          Effect.withRandom(Random.make(seed))
        )
        assert.isTrue(isSorted(ids), "strictly increasing in generation order")
        assert.isTrue(
          ids.every((id) => Schema.is(Ids.RunId)(id) && timeOf(id) === time),
          "valid ULIDs stamped with that millisecond"
        )
      }),
    { fastCheck: { numRuns: 5 } }
  )

  it.effect.prop(
    "across clock steps forwards and backwards, every id sorts after the one before",
    [
      fc.integer({ min: 0, max: 2 ** 40 }),
      fc.array(fc.record({ step: fc.integer({ min: -10_000, max: 10_000 }), count: fc.integer({ min: 1, max: 40 }) }), {
        minLength: 1,
        maxLength: 30
      }),
      fc.integer()
    ],
    ([start, moves, seed]) =>
      Effect.gen(function* () {
        const { clock, set } = manualClock(start)
        const ids: Array<string> = []
        let now = start
        let highest = -1 // the latest time an id was stamped with
        for (const { step, count } of moves) {
          now = Math.max(0, now + step)
          set(now)
          for (let i = 0; i < count; i++) {
            const id = yield* Ids.ulid.pipe(Effect.withClock(clock))
            // Forwards: stamped with the clock's time; backwards: the last time is kept.
            assert.strictEqual(timeOf(id), Math.max(now, highest))
            highest = Math.max(highest, now)
            ids.push(id)
          }
        }
        assert.isTrue(isSorted(ids))
      }).pipe(Effect.withRandom(Random.make(seed)))
  )

  it.effect("ids from many fibers sharing one clock are all distinct and each fiber's ids increase", () =>
    Effect.gen(function* () {
      const perFiber = yield* Effect.all(
        Array.from({ length: 50 }, () => Effect.replicateEffect(Ids.ulid, 100)),
        { concurrency: "unbounded" }
      )
      assert.isTrue(perFiber.every(isSorted))
      assert.strictEqual(new Set(perFiber.flat()).size, 5_000)
    })
  )

  it.effect("deterministic under TestClock and TestRandom: the same seed gives the same ids", () =>
    Effect.gen(function* () {
      const make = (seed: string) =>
        Effect.replicateEffect(Ids.ulid, 50).pipe(
          Effect.withClock(manualClock(1_700_000_000_000).clock),
          Effect.withRandom(Random.make(seed))
        )
      const a = yield* make("seed")
      assert.deepStrictEqual(yield* make("seed"), a)
      assert.notDeepEqual(yield* make("other seed"), a)
      // Under the test's own TestClock: stamped with its time, which only moves when told to.
      const first = yield* Ids.ulid
      assert.strictEqual(timeOf(first), yield* TestClock.currentTimeMillis)
      yield* TestClock.adjust("1 second")
      const later = yield* Ids.ulid
      assert.strictEqual(timeOf(later), 1_000)
      assert.isTrue(first < later)
    })
  )

  it.effect("without a provided Random, the random part is fresh and uses every base32 digit", () =>
    Effect.gen(function* () {
      // Each new clock starts its own sequence, so each id below is one fresh draw (no increment).
      const ids = yield* Effect.forEach(Array.from({ length: 2_000 }), () =>
        Ids.ulid.pipe(Effect.withClock(manualClock(1_700_000_000_000).clock))
      )
      const randomParts = ids.map((id) => id.slice(10))
      assert.strictEqual(new Set(randomParts).size, ids.length, "no two fresh draws alike")
      for (let position = 0; position < 16; position++) {
        const digits = new Set(randomParts.map((r) => r[position]))
        assert.strictEqual(digits.size, 32, `digit ${position} takes all 32 values`)
      }
    })
  )

  it.effect("runs started in the same millisecond are listed in the order they were started", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "ok" }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          // TestClock does not move: every run id below is made in the same millisecond.
          const started: Array<string> = []
          let sessionId: Ids.SessionId | undefined
          for (let i = 0; i < 40; i++) {
            const { run } = yield* gateway.startRun(Caller.user("alice"), { key: "same", text: `message ${i}` })
            sessionId = run.sessionId
            started.push(run.id)
          }
          const listed = yield* gateway.listRuns(Caller.operator("op"), { sessionId: sessionId! })
          assert.deepStrictEqual(
            listed.map((r) => r.id),
            started
          )
          assert.deepStrictEqual(
            listed.map((r) => r.input),
            started.map((_, i) => `message ${i}`)
          )
        })
      )
    })
  )
})

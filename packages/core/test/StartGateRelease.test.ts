/**
 * The start gate gives its permit back however a gated start ends — in an uninterruptible region
 * (admission's, where it skips `ensuring`'s mask) and in an interruptible one: a failure, a defect,
 * success. Observed synchronously: with one permit, a start within the limit runs at once
 * (`Effect.runSync` completes), one beyond it is deferred to the gate's scheduler (`runSync` cannot).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { makeStartGate } from "../src/kernel/internal/startGate.js"

const runsAtOnce = (gate: ReturnType<typeof makeStartGate>) =>
  Exit.isSuccess(Effect.runSyncExit(gate(Effect.succeed("ran"))))

describe("start gate permits", () => {
  for (const region of ["uninterruptible", "interruptible"] as const) {
    const within = <A, E>(effect: Effect.Effect<A, E>) =>
      region === "uninterruptible" ? Effect.uninterruptible(effect) : effect
    it(`${region}: success, failure and defect each give the permit back`, () => {
      const gate = makeStartGate(1)
      assert.isTrue(runsAtOnce(gate))
      assert.strictEqual(Effect.runSync(within(gate(Effect.succeed(1)))), 1)
      assert.isTrue(runsAtOnce(gate))
      assert.isTrue(Exit.isFailure(Effect.runSyncExit(within(gate(Effect.fail("no"))))))
      assert.isTrue(runsAtOnce(gate))
      assert.isTrue(Exit.isFailure(Effect.runSyncExit(within(gate(Effect.die("boom"))))))
      assert.isTrue(runsAtOnce(gate))
    })
  }

  it("a start held within the limit makes the next one wait its turn (the check above can fail)", () => {
    const gate = makeStartGate(1)
    // Held: never resumed, so its permit stays taken.
    Effect.runFork(Effect.uninterruptible(gate(Effect.never)))
    assert.isFalse(runsAtOnce(gate))
  })

  it("interrupted while interruptible, the permit comes back", async () => {
    const gate = makeStartGate(1)
    const fiber = Effect.runFork(gate(Effect.never))
    await Effect.runPromise(Effect.yieldNow())
    assert.isNull(fiber.unsafePoll()) // held
    await Effect.runPromise(Effect.fiberIdWith((id) => Effect.sync(() => fiber.unsafeInterruptAsFork(id))))
    assert.isTrue(Exit.isInterrupted(await Effect.runPromise(Effect.exit(Effect.fromFiber(fiber)))))
    assert.isTrue(runsAtOnce(gate))
  })
  // Admission's own shape: gated inside `uninterruptibleMask`, its body made interruptible again by
  // `restore`, and interrupted there — within the limit, and beyond it (on the gate's scheduler).
  for (const beyond of [false, true]) {
    it.live(
      `admission's shape interrupted in its restored body${beyond ? ", beyond the limit" : ""}: the permit comes back`,
      () =>
        Effect.gen(function* () {
          const gate = makeStartGate(1)
          const entered = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const held = beyond
            ? yield* Effect.fork(
                Effect.uninterruptible(
                  gate(Deferred.succeed(entered, undefined).pipe(Effect.zipRight(Deferred.await(release))))
                )
              )
            : undefined
          if (held) yield* Deferred.await(entered)
          const reached = yield* Deferred.make<void>()
          const start = yield* Effect.fork(
            Effect.uninterruptibleMask((restore) =>
              gate(restore(Deferred.succeed(reached, undefined).pipe(Effect.zipRight(Effect.never))))
            )
          )
          yield* Deferred.await(reached)
          assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(start)))
          if (held) {
            yield* Deferred.succeed(release, undefined)
            yield* Fiber.join(held)
          }
          assert.isTrue(runsAtOnce(gate))
        })
    )
  }
})

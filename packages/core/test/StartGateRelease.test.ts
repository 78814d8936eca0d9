/**
 * The start gate gives its permit back however a gated start ends — in an uninterruptible region
 * (admission's, where it skips `ensuring`'s mask) and in an interruptible one: a failure, a defect,
 * success. Observed synchronously: with one permit, a start within the limit runs at once
 * (`Effect.runSync` completes), one beyond it is deferred to the gate's scheduler (`runSync` cannot).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
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
})

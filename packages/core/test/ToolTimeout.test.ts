import { assert, describe, it } from "@effect/vitest"
import { Deferred, type Duration, Effect, Either, Exit, Fiber, FiberRef, Schema, TestClock } from "effect"
import { Errors, Tool } from "../src/index.js"

// The tool runtime's timeout runs a tool synchronously first and races only one that suspends
// (ports/internal/timeout.ts): these pin that both paths keep `Effect.timeoutFail`'s behaviour.

const context = {
  sessionId: "01KA0000000000000000000SES" as never,
  runId: "01KA0000000000000000000RUN" as never,
  toolCallId: "01KA00000000000000000000TC" as never,
  principal: "test",
  note: () => Effect.void
}

const toolOf = (
  execute: () => Effect.Effect<unknown, Errors.ToolError>,
  timeout: Duration.DurationInput = "1 second"
) =>
  Tool.make("t.op", {
    description: "test",
    parameters: Schema.Struct({}),
    risk: "low",
    timeout,
    execute
  })

const run = (tool: Tool.AnyTool) => Tool.makeRuntime([tool]).execute(tool, {}, context)

describe("a tool call's timeout", () => {
  it.effect("a tool that finishes without suspending answers, with the caller's fiber refs", () =>
    Effect.gen(function* () {
      const ref = FiberRef.unsafeMake("unset")
      const tool = toolOf(() => FiberRef.get(ref).pipe(Effect.map((v) => `seen ${v}`)))
      const outcome = yield* run(tool).pipe(Effect.locally(ref, "set by the caller"))
      assert.strictEqual(outcome.output, "seen set by the caller")
    })
  )

  it.effect("a typed failure and a defect pass through unchanged (sync and after suspending)", () =>
    Effect.gen(function* () {
      const failure = new Errors.ToolError({ tool: "t.op", reason: "failed", message: "no" })
      const failed = yield* Effect.either(run(toolOf(() => Effect.fail(failure))))
      assert.deepStrictEqual(failed, Either.left(failure))
      const later = run(toolOf(() => Effect.sleep("10 millis").pipe(Effect.zipRight(Effect.fail(failure)))))
      const fiber = yield* Effect.fork(Effect.either(later))
      yield* TestClock.adjust("10 millis")
      assert.deepStrictEqual(yield* Fiber.join(fiber), Either.left(failure))
      const died = yield* Effect.exit(run(toolOf(() => Effect.die("boom"))))
      assert.strictEqual(Exit.isFailure(died) ? died.cause._tag : "Success", "Die", "a defect stays a defect")
    })
  )

  it.effect("a tool that suspends and finishes before its deadline answers", () =>
    Effect.gen(function* () {
      const tool = toolOf(() => Effect.sleep("900 millis").pipe(Effect.as("done")))
      const fiber = yield* Effect.fork(run(tool))
      yield* TestClock.adjust("900 millis")
      assert.strictEqual((yield* Fiber.join(fiber)).output, "done")
    })
  )

  it.effect("a tool that suspends past its deadline fails with `timeout` and is interrupted", () =>
    Effect.gen(function* () {
      let interrupted = false
      const tool = toolOf(() =>
        Effect.sleep("1 minute").pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      )
      const fiber = yield* Effect.fork(Effect.either(run(tool)))
      yield* TestClock.adjust("999 millis")
      assert.isNull(yield* Fiber.poll(fiber).pipe(Effect.map((o) => (o._tag === "Some" ? "done" : null))))
      yield* TestClock.adjust("1 millis")
      const outcome = yield* Fiber.join(fiber)
      assert.isTrue(Either.isLeft(outcome) && outcome.left.reason === "timeout")
      assert.isTrue(interrupted, "the timed-out tool was interrupted before the error was returned")
    })
  )

  it.effect("interrupting the caller interrupts a suspended tool and waits for it", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      let interrupted = false
      const tool = toolOf(
        () =>
          Deferred.succeed(started, undefined).pipe(
            Effect.zipRight(Effect.never),
            Effect.onInterrupt(() => Effect.sync(() => (interrupted = true)))
          ),
        "1 hour"
      )
      const fiber = yield* Effect.fork(run(tool))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      assert.isTrue(interrupted)
    })
  )

  // Real time: a tool running longer than its deadline must still give the event loop and its own
  // deadline their turn. Effect's default scheduler yields to microtasks every 2,048 steps and to
  // timers only every 2,048 of those (~4 M steps: about a second here, several on a loaded machine),
  // so the tools below give up only after 20 s — long after their timer or deadline should have won.
  it.live(
    "a tool that yields while it waits for a timer lets the timer fire",
    () =>
      Effect.gen(function* () {
        let fired = false
        const timer = setTimeout(() => {
          fired = true
        }, 20)
        const waiting = toolOf(
          () =>
            Effect.gen(function* () {
              const start = Date.now()
              while (!fired && Date.now() - start < 20_000) yield* Effect.yieldNow()
              return fired ? "timer fired" : "event loop blocked"
            }),
          "10 seconds"
        )
        const out = yield* run(waiting)
        clearTimeout(timer)
        assert.strictEqual(out.output, "timer fired")
      }),
    60_000
  )

  it.live(
    "a busy tool that never suspends is still cut off at its deadline",
    () =>
      Effect.gen(function* () {
        const busy = toolOf(
          () =>
            Effect.gen(function* () {
              const start = Date.now()
              let steps = 0
              while (Date.now() - start < 20_000) yield* Effect.sync(() => steps++)
              return `ran to the end: ${steps} steps`
            }),
          "100 millis"
        )
        const out = yield* Effect.either(run(busy))
        assert.isTrue(Either.isLeft(out) && out.left instanceof Errors.ToolError && out.left.reason === "timeout")
      }),
    60_000
  )
})

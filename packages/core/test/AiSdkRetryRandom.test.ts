/**
 * The adapter's retry is `Effect.retry` with its schedule, built on a call's first failure. Every
 * first failure, retryable or not, steps the schedule as `Effect.retry` would: the schedule's jitter
 * draws from the run's `Random`, so under a seeded `Random` (repeatable ids in tests) what a run
 * draws after a failed model call is what it drew before the retry was built lazily.
 */
import { assert, describe, it } from "@effect/vitest"
import { APICallError } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { Duration, Effect, Random, Schedule } from "effect"
import { AiSdkModel } from "../src/ai-sdk.js"
import { ProviderError } from "../src/domain/Errors.js"

const failing = (status: number) =>
  new MockLanguageModelV4({
    doStream: async () => {
      throw new APICallError({
        message: `status ${status}`,
        url: "http://127.0.0.1/",
        requestBodyValues: {},
        statusCode: status
      })
    }
  })

// The adapter's schedule for these options, under a plain `Effect.retry` around the call.
const reference = <A>(call: Effect.Effect<A, unknown>) =>
  Effect.retry(call, {
    schedule: Schedule.exponential(Duration.decode("1 millis"), 2).pipe(
      Schedule.jittered,
      Schedule.union(Schedule.spaced(Duration.decode("20 seconds"))),
      Schedule.intersect(Schedule.recurs(3))
    ),
    while: (e) => e instanceof ProviderError && e.retryable
  })

const request = { messages: [{ role: "user" as const, text: "hi" }], tools: [] }
const drawAfter = (call: Effect.Effect<void, unknown>) =>
  Effect.either(call).pipe(Effect.zipRight(Random.next), Effect.withRandom(Random.make(42)))

describe("the adapter's retry and the run's Random", () => {
  it.live("a call failing for good (401) draws what Effect.retry drew", () =>
    Effect.gen(function* () {
      const model = AiSdkModel.make(failing(401) as never, { retry: { baseDelay: "1 millis" } })
      const adapter = yield* drawAfter(model.streamToNow!(request, () => undefined))
      // The same failure, as the adapter maps a 401, under a plain `Effect.retry` with its schedule.
      const denied = new ProviderError({ provider: "mock", reason: "auth", retryable: false, message: "status 401" })
      const expected = yield* drawAfter(reference(Effect.fail(denied)))
      assert.strictEqual(adapter, expected)
    })
  )
})

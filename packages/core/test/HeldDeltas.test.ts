/**
 * Deltas a provider hands over with `more` (the next event is at hand) are held by the loop and
 * joined into one append. A call that fails, or is interrupted between two calls, while deltas are
 * held must still put them on the tape, ahead of the run's end — exactly the deltas the same events
 * without `more` leave there.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { Caller, Errors, Gateway, type ModelProvider, type TapeEvent } from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { recordingAppends } from "./helpers.js"

const delta = (text: string): ModelProvider.ModelEvent => ({ type: "text-delta", text })
const texts = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.flatMap((e) => (e._tag === "AssistantDelta" ? [e.text] : []))

// A model whose plain sink gets `events` (each with `more` when `more` is on, but the last), then
// runs `after` (a failure, or a wait where a cancel lands) without calling the sink again.
const model = (
  events: ReadonlyArray<ModelProvider.ModelEvent>,
  more: boolean,
  between: (i: number) => Effect.Effect<void>,
  after: Effect.Effect<void, Errors.ProviderError>
): ModelProvider.Service => ({
  name: "held",
  stream: () => {
    throw new Error("the loop uses streamToNow")
  },
  streamToNow: (_request, sink) =>
    Effect.zipRight(
      Effect.forEach(
        events,
        (event, i) => Effect.suspend(() => Effect.zipRight(sink(event, more) ?? Effect.void, between(i))),
        { discard: true }
      ),
      after
    )
})

const runOnce = (provider: (reached: Deferred.Deferred<void>) => ModelProvider.Service, cancel: boolean) =>
  Effect.gen(function* () {
    const { groups: appends, layer } = recordingAppends()
    const reached = yield* Deferred.make<void>()
    const seen = yield* Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "hi" })
      if (cancel) {
        yield* Deferred.await(reached)
        yield* gateway.cancelRun(Caller.user("alice"), run.id)
      }
      return yield* collect(events)
    }).pipe(Effect.provide(gatewayLayer({ model: provider(reached), journal: layer, coalesceChars: 1 })), Effect.scoped)
    return { stored: appends.flat(), seen }
  })

describe("held deltas", () => {
  it.live("a provider failing after `more`: the held deltas are stored before the run's error", () =>
    Effect.gen(function* () {
      const broke = Effect.fail(
        new Errors.ProviderError({ provider: "held", reason: "network", retryable: false, message: "the stream broke" })
      )
      const outcome = (more: boolean) =>
        runOnce(() => model([delta("a "), delta("b ")], more, () => Effect.void, broke), false)
      const joined = yield* outcome(true)
      const plain = yield* outcome(false)
      assert.deepStrictEqual(texts(plain.stored), ["a ", "b "])
      assert.deepStrictEqual(texts(joined.stored), ["a ", "b "])
      // Before the run's error, and what the subscriber saw is what was stored.
      const lastDelta = joined.stored.findLastIndex((e) => e._tag === "AssistantDelta")
      assert.isTrue(lastDelta < joined.stored.findIndex((e) => e._tag === "RunError"))
      assert.deepStrictEqual(texts(joined.seen), ["a ", "b "])
    })
  )

  it.live("a run cancelled between two calls of one burst: the held deltas are stored", () =>
    Effect.gen(function* () {
      const outcome = (more: boolean) =>
        runOnce(
          (reached) =>
            model(
              [delta("a "), delta("b "), delta("c ")],
              more,
              // After the second delta the fiber takes other steps (no wait): the cancel lands here.
              (i) => (i === 1 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void),
              Effect.void
            ),
          true
        )
      const joined = yield* outcome(true)
      const plain = yield* outcome(false)
      assert.deepStrictEqual(texts(plain.stored), ["a ", "b "])
      assert.deepStrictEqual(texts(joined.stored), ["a ", "b "])
      const end = joined.stored.at(-1)
      assert.strictEqual(end?._tag, "RunStateChanged")
      assert.strictEqual(end?._tag === "RunStateChanged" ? end.to : undefined, "Cancelled")
    })
  )

  it.live("a write handed back but never run (the call interrupted first): the held deltas are stored", () =>
    Effect.gen(function* () {
      // The provider hands the last delta over without `more`, gets the joined write back, and is
      // interrupted before it runs it (the contract lets an interrupted call drop it).
      const dropping = (reached: Deferred.Deferred<void>): ModelProvider.Service => ({
        name: "dropping",
        stream: () => {
          throw new Error("the loop uses streamToNow")
        },
        streamToNow: (_request, sink) =>
          Effect.suspend(() => {
            sink(delta("a "), true)
            sink(delta("b "), true)
            const write = sink(delta("c "), false)
            assert.isDefined(write)
            return Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never)
          })
      })
      const { stored } = yield* runOnce(dropping, true)
      assert.deepStrictEqual(texts(stored), ["a ", "b ", "c "])
      const end = stored.at(-1)
      assert.strictEqual(end?._tag === "RunStateChanged" ? end.to : undefined, "Cancelled")
    })
  )
})

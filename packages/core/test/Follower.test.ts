/**
 * `Gateway.follow`: the session's tape behind plain take/onReady callbacks. Authorized in core like
 * `subscribe`; replay then live without gap or duplicate; a follower that does not take is cut off
 * with a resumable `StreamLagged`; closing detaches it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { Caller, Follower, Gateway, Journal, ScriptedModel, type TapeEvent } from "../src/index.js"
import { gapFree, gatewayLayer } from "../src/testing.js"

const alice = Caller.user("alice")

/** Take until `until` holds for an event, waiting with `onReady` between takes. */
const drain = (f: Follower.Follower, until: (e: TapeEvent.TapeEvent) => boolean) =>
  Effect.promise(async () => {
    const seen: Array<TapeEvent.TapeEvent> = []
    for (;;) {
      const r = f.take()
      if (r === undefined) {
        await new Promise<void>((wake) => f.onReady(wake))
        continue
      }
      if (r === Follower.Done || Follower.isFailed(r)) return { seen, end: r }
      for (const e of r) seen.push(e)
      if (r.some(until)) return { seen, end: undefined }
    }
  }).pipe(Effect.timeout("5 seconds"))

const layer = (liveBufferEvents?: number) =>
  gatewayLayer({
    model: ScriptedModel.make(() => ({ text: Array.from({ length: 20 }, (_, i) => `w${i} `) })),
    coalesceChars: 1,
    ...(liveBufferEvents === undefined ? {} : { liveBufferEvents })
  }) as Layer.Layer<Gateway.Gateway | Journal.Journal>

describe("Gateway.follow", () => {
  it.live("another principal's session is NotFound", () =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const { session, run } = yield* gateway.sendMessage(alice, { text: "hi" })
      yield* gateway.awaitRun(alice, run.id)
      const refused = yield* Effect.flip(Effect.scoped(gateway.follow(Caller.user("bob"), session.id, 0)))
      assert.strictEqual(refused._tag, "NotFound")
    }).pipe(Effect.provide(layer()))
  )

  it.live("replays the journal, then follows live: gap-free and equal to the stored tape", () =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const journal = yield* Journal.Journal
      const first = yield* gateway.sendMessage(alice, { text: "one" })
      yield* gateway.awaitRun(alice, first.run.id)
      const seen = yield* Effect.scoped(
        Effect.gen(function* () {
          const f = yield* gateway.follow(alice, first.session.id, 0)
          const second = yield* gateway.sendMessage(alice, { text: "two", sessionId: first.session.id })
          const { seen, end } = yield* drain(
            f,
            (e) => e.runId === second.run.id && e._tag === "RunStateChanged" && e.to === "Done"
          )
          assert.strictEqual(end, undefined)
          return seen
        })
      )
      assert.strictEqual(gapFree(seen), undefined)
      const stored = yield* journal.readTape(first.session.id, { afterSeq: 0 })
      assert.deepStrictEqual(
        seen.map((e) => e.tapeSeq),
        stored.map((e) => e.tapeSeq)
      )
    }).pipe(Effect.provide(layer()))
  )

  it.live("a follower that does not take is cut off with StreamLagged after its last seq; close ends it", () =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const first = yield* gateway.sendMessage(alice, { text: "one" })
      yield* gateway.awaitRun(alice, first.run.id)
      yield* Effect.scoped(
        Effect.gen(function* () {
          const f = yield* gateway.follow(alice, first.session.id, 0)
          // Replay to the end of the stored tape, then stop taking while a run streams 20+ events.
          let last = 0
          for (;;) {
            const r = f.take()
            if (r === undefined) break
            assert.ok(Array.isArray(r))
            last = (r as ReadonlyArray<TapeEvent.TapeEvent>).at(-1)?.tapeSeq ?? last
          }
          const second = yield* gateway.sendMessage(alice, { text: "two", sessionId: first.session.id })
          yield* gateway.awaitRun(alice, second.run.id)
          const r = f.take()
          assert.ok(Follower.isFailed(r))
          assert.strictEqual(r.failure._tag, "StreamLagged")
          assert.strictEqual(r.failure._tag === "StreamLagged" && r.failure.lastSeq, last)
          f.close()
          assert.strictEqual(f.take(), Follower.Done)
        })
      )
    }).pipe(Effect.provide(layer(8)))
  )
})

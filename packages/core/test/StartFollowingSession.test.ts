/**
 * `startRunFollowing(caller, request, { session: true })` (gRPC RunStream's start): the follower is
 * the whole session's from the run's first event, attached before the start commit — the run's
 * events and whatever the session commits afterwards reach it by their publication, nothing read
 * back. And its seam: a whole-session live follower attached after events it should deliver were
 * already published (its caller read the head, then something else committed) reads them, so the
 * session's tape stays gap-free for it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Metric } from "effect"
import {
  Caller,
  Gateway,
  type Ids,
  Journal,
  MemoryJournal,
  Metrics,
  Records,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import { makeTape } from "../src/kernel/internal/tape.js"
import { gapFree, gatewayLayer } from "../src/testing.js"
import { countingReads, drain } from "./helpers.js"

const alice = Caller.user("alice")
const bob = Caller.user("bob")
const subscribers = Effect.map(Metric.value(Metrics.tapeSubscribers), (s) => s.value)

const doneOf = (runId: string) => (e: TapeEvent.TapeEvent) =>
  e.runId === runId && e._tag === "RunStateChanged" && e.to === "Done"

const counted = Effect.map(MemoryJournal.make(), countingReads)

describe("startRunFollowing with the whole session", () => {
  it.live("delivers the run and the session's later runs by publication, gap-free, nothing read back", () =>
    Effect.gen(function* () {
      const { journal, reads } = yield* counted
      const model = ScriptedModel.make((_, i) => ({ text: ["ans", "wer ", `${i}`] }))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const first = yield* gateway.sendMessage(alice, { text: "one", key: "k" })
        yield* gateway.awaitRun(alice, first.run.id)
        const baseline = yield* subscribers
        const before = reads.count
        const seen = yield* Effect.scoped(
          Effect.gen(function* () {
            const started = yield* gateway.startRunFollowing(
              alice,
              { text: "two", sessionId: first.session.id },
              { session: true }
            )
            assert.strictEqual(yield* subscribers, baseline + 1)
            const two = yield* drain(started.follower, doneOf(started.run.id))
            // The follower outlives its run: the session's next run comes through it too.
            const next = yield* gateway.sendMessage(alice, { text: "three", sessionId: first.session.id })
            const three = yield* drain(started.follower, doneOf(next.run.id))
            return { events: [...two, ...three], startSeq: started.run.startSeq }
          })
        )
        assert.strictEqual(reads.count - before, 0)
        assert.strictEqual(yield* subscribers, baseline)
        assert.strictEqual(seen.events[0]?.tapeSeq, seen.startSeq)
        assert.strictEqual(gapFree(seen.events, seen.startSeq), undefined)
        const stored = yield* journal.readTape(first.session.id, { afterSeq: seen.startSeq - 1 })
        assert.deepStrictEqual(seen.events, stored)
      }).pipe(
        Effect.provide(
          gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) }) as Layer.Layer<Gateway.Gateway>
        )
      )
    })
  )

  it.live("another principal's start answers NotFound with nothing attached", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "hi" }))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const mine = yield* gateway.sendMessage(alice, { text: "mine" })
        yield* gateway.awaitRun(alice, mine.run.id)
        const baseline = yield* subscribers
        const refused = yield* Effect.flip(
          Effect.scoped(
            gateway.startRunFollowing(bob, { text: "let me in", sessionId: mine.session.id }, { session: true })
          )
        )
        assert.strictEqual(refused._tag, "NotFound")
        assert.strictEqual(yield* subscribers, baseline)
      }).pipe(Effect.provide(gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway>))
    })
  )

  it.effect("a live whole-session follower attached behind the head reads what it missed, then goes on live", () =>
    Effect.gen(function* () {
      const session = "01KA0000000000000000000SEM" as Ids.SessionId
      const { journal, reads } = yield* counted
      yield* journal.createSession(Records.makeSession({ id: session, principal: "alice" }))
      const tape = yield* makeTape(journal)
      const note = (text: string) =>
        ({ _tag: "SessionNote", sessionId: session, runId: null, at: 0, author: "t", text }) as const
      yield* tape.append(session, [note("1"), note("2")])
      // Its caller read the head at 1; event 2 was published before it attached.
      const follower = tape.attachLive(session, 1, {})
      yield* tape.append(session, [note("3")])
      const drained = yield* Effect.fork(drain(follower, (e) => e._tag === "SessionNote" && e.text === "4"))
      yield* tape.append(session, [note("4")])
      const events = yield* Fiber.join(drained)
      follower.close()
      assert.deepStrictEqual(
        events.map((e) => e.tapeSeq),
        [2, 3, 4]
      )
      assert.strictEqual(reads.count, 1)
    })
  )
})

/**
 * `Gateway.follow`: the session's tape behind plain take/onReady callbacks. Authorized in core like
 * `subscribe`; replay then live without gap or duplicate; a follower that does not take is cut off
 * with a resumable `StreamLagged`; closing detaches it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { Caller, Follower, Gateway, Journal, ScriptedModel, type TapeEvent } from "../src/index.js"
import { gapFree, gatewayLayer } from "../src/testing.js"
import { pendingApproval, recordingTool, withGateway } from "./helpers.js"

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

  it.live("StartedRun.follow is the run's approval channel while open; closing it releases the channel", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      // Two paced deltas, then a call that needs approval.
      const model = ScriptedModel.make((request) =>
        request.messages.at(-1)?.role === "tool"
          ? { text: "done" }
          : { text: ["a ", "b "], delayPerDelta: "30 millis", toolCalls: [{ name: "fs.write", args: { x: 1 } }] }
      )
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const op = Caller.operator("op")
          // Open: the call waits for an approval.
          const kept = yield* gateway.startRun(alice, { text: "write" })
          yield* Effect.scoped(
            Effect.gen(function* () {
              yield* kept.follow
              const pending = yield* pendingApproval(gateway, kept.run.id)
              assert.strictEqual((yield* gateway.getRun(op, kept.run.id)).state, "WaitingForApproval")
              yield* gateway.resolveApproval(alice, { approvalId: pending.id, decision: "deny" })
              yield* gateway.awaitRun(op, kept.run.id)
            })
          )
          // Closed before the call: nobody can answer, so it is denied at once (fail closed).
          const dropped = yield* gateway.startRun(alice, { text: "write", sessionId: kept.session.id })
          yield* Effect.scoped(dropped.follow)
          assert.strictEqual((yield* gateway.awaitRun(op, dropped.run.id)).state, "Done")
          const tape = yield* gateway.readTape(op, kept.session.id, { afterSeq: 0 })
          const results = tape.filter((e) => e.runId === dropped.run.id && e._tag === "ToolResult")
          assert.match((results[0] as TapeEvent.TapeEvent & { output: string }).output, /no approval channel/)
          assert.deepStrictEqual(calls, [])
        })
      )
    })
  )
})

describe("a follower whose wake-up callback throws", () => {
  it.live("delays neither the other followers nor the run, nor later appends", () =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const { session, run } = yield* gateway.sendMessage(alice, { text: "one" })
      yield* gateway.awaitRun(alice, run.id)
      const warnings: Array<string> = []
      const onWarning = (w: Error) => warnings.push(w.message)
      process.on("warning", onWarning)
      const outcome = yield* Effect.scoped(
        Effect.gen(function* () {
          const bad = yield* gateway.follow(alice, session.id, 0)
          while (bad.take() !== undefined) {} // caught up: the next publication wakes it
          bad.onReady(() => {
            throw new Error("embedder bug")
          })
          const good = yield* gateway.follow(alice, session.id, 0)
          const second = yield* gateway.sendMessage(alice, { text: "two", sessionId: session.id })
          const { end } = yield* drain(
            good,
            (e) => e.runId === second.run.id && e._tag === "RunStateChanged" && e.to === "Done"
          )
          const third = yield* gateway.sendMessage(alice, { text: "three", sessionId: session.id })
          return { end, done: yield* gateway.awaitRun(alice, third.run.id).pipe(Effect.timeout("5 seconds")) }
        })
      ).pipe(
        Effect.zipLeft(Effect.sleep("10 millis")), // warnings are emitted on a later tick
        Effect.ensuring(Effect.sync(() => process.off("warning", onWarning)))
      )
      assert.isUndefined(outcome.end)
      assert.strictEqual(outcome.done.state, "Done")
      assert.isTrue(warnings.some((w) => w.includes("embedder bug")))
    }).pipe(Effect.provide(layer()))
  )
})

describe("Follower.encodedOnce", () => {
  it("encodes an event once while it is among the last `size` encoded, and again (the same result) after", () => {
    let encodes = 0
    const encode = Follower.encodedOnce((e: TapeEvent.TapeEvent) => {
      encodes++
      return `#${e.tapeSeq}`
    }, 4)
    const events = Array.from({ length: 10 }, (_, i) => ({ tapeSeq: i + 1 }) as unknown as TapeEvent.TapeEvent)
    // Every follower of a session takes the same object: one encode for all of them.
    for (const e of events.slice(0, 4)) for (let follower = 0; follower < 3; follower++) encode(e)
    assert.strictEqual(encodes, 4)
    // Identity, not equality: an equal but different object is encoded on its own.
    assert.strictEqual(encode({ ...events[0]! }), "#1")
    assert.strictEqual(encodes, 5)
    // Pushed out of the ring by newer events: encoded again, to the same bytes.
    for (const e of events.slice(4)) encode(e)
    assert.strictEqual(encode(events[0]!), "#1")
    assert.strictEqual(encodes, 5 + 6 + 1)
    assert.strictEqual(encode(events[9]!), "#10")
    assert.strictEqual(encodes, 12)
  })

  it("does not hold values `keep` refuses: they are encoded each time", () => {
    let encodes = 0
    const encode = Follower.encodedOnce(
      (e: TapeEvent.TapeEvent) => {
        encodes++
        return e.tapeSeq === 1 ? "x".repeat(100) : "small"
      },
      4,
      (value) => value.length <= 10
    )
    const [big, small] = [1, 2].map((tapeSeq) => ({ tapeSeq }) as unknown as TapeEvent.TapeEvent)
    for (let follower = 0; follower < 3; follower++) {
      encode(big!)
      encode(small!)
    }
    assert.strictEqual(encodes, 3 + 1)
  })
})

/**
 * A paced delta's plain path (PERF-NOTES round 15, slice P): on the live clock the scripted model
 * paces `streamToNow` with a plain timer (no `Effect.sleep` per delta), and the loop writes held
 * deltas through the tape's plain `appendWith` when the journal has a plain append (the daemon's
 * path). Both keep what the Effect forms guaranteed: the order, a returned write run before the
 * next event, interruption while a delta is not yet due (it never reaches the sink), a throwing sink
 * as the call's defect; a secret split across paced deltas redacted on the tape; a failing delta
 * write ending the run with its end event last; a cancellation between paced deltas.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Layer } from "effect"
import {
  Caller,
  Errors,
  Gateway,
  Journal,
  MemoryJournal,
  ModelProvider,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import { gapFree, gatewayLayer } from "../src/testing.js"
import { chunk, withChatServer } from "./chatServer.js"

const request: ModelProvider.ModelRequest = { messages: [{ role: "user", text: "go" }], tools: [] }
const texts = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.flatMap((e) => (e._tag === "AssistantDelta" ? [e.text] : []))

describe("ScriptedModel's paced streamToNow on the live clock", () => {
  it.live("hands each delta over after its delay, in order, and runs a returned write before the next", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([
        { text: ["a", "b", "c", "d"], toolCalls: [{ name: "t", id: "c1" }], delayPerDelta: "5 millis" }
      ])
      const log: Array<string> = []
      const at: Array<number> = []
      yield* model.streamToNow!(request, (event) => {
        at.push(performance.now())
        log.push(event.type === "text-delta" ? event.text : event.type)
        if (event.type === "text-delta" && event.text === "b")
          return Effect.zipRight(
            Effect.sleep("20 millis"),
            Effect.sync(() => log.push("wrote b"))
          )
        return undefined
      })
      assert.deepStrictEqual(log, ["a", "b", "wrote b", "c", "d", "tool-call", "finish"])
      // Each delta waited for its delay after the previous event (timers fire no earlier than 1 ms
      // short of their delay); "c" waited for b's write (20 ms) and then its own delay.
      for (const i of [1, 3]) assert.isAtLeast(at[i]! - at[i - 1]!, 4, `gap before event ${i}`)
      assert.isAtLeast(at[2]! - at[1]!, 24)
    })
  )

  it.live("interrupted while a delta is not yet due: that delta never reaches the sink", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ text: ["a", "b", "c"], delayPerDelta: "40 millis" }])
      const first = yield* Deferred.make<void>()
      let calls = 0
      const fiber = yield* Effect.fork(
        // The first delta's write signals from inside the model's fiber, which then goes straight on
        // to wait for the next delta: by the time the test fiber runs, that wait has begun.
        model.streamToNow!(request, () => {
          calls++
          return calls === 1 ? Deferred.complete(first, Effect.void) : undefined
        })
      )
      yield* Deferred.await(first)
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      // Past the next delta's due time: its timer was cleared (a timer due later fires later).
      yield* Effect.sleep("120 millis")
      assert.strictEqual(calls, 1)
    })
  )

  it.live("a sink that throws fails the call with that defect", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ text: ["a", "b"], delayPerDelta: "1 millis" }])
      const boom = new Error("boom")
      const exit = yield* Effect.exit(
        model.streamToNow!(request, () => {
          throw boom
        })
      )
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      if (Exit.isFailure(exit)) assert.strictEqual(Cause.squash(exit.cause), boom)
    })
  )
  it.live(
    "a delay no timer can hold (infinite, or past 2^31-1 ms) never delivers the delta, as the clock's sleep",
    () =>
      Effect.gen(function* () {
        for (const delayPerDelta of [Duration.infinity, Duration.days(30)]) {
          const model = ScriptedModel.make([{ text: ["a"], delayPerDelta }])
          const got: Array<string> = []
          const done = yield* model.streamToNow!(request, (event) => {
            got.push(event.type)
            return undefined
          }).pipe(Effect.timeout("150 millis"), Effect.option)
          assert.isTrue(done._tag === "None", "the call completed")
          assert.deepStrictEqual(got, [])
        }
      })
  )
})

/** A run started, cancelled while `held` (its delta's commit in flight), then `release`d: its end and tape. */
const cancelWhileHeld = (held: Deferred.Deferred<void>, release: () => void) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const caller = Caller.user("alice")
    const started = yield* gateway.sendMessage(caller, { text: "go" })
    yield* Deferred.await(held)
    const cancelling = yield* Effect.fork(gateway.cancelRun(caller, started.run.id))
    yield* Effect.sleep("20 millis")
    release()
    yield* Fiber.join(cancelling)
    const run = yield* gateway.awaitRun(caller, started.run.id)
    const tape = yield* gateway.readTape(caller, started.session.id, { afterSeq: 0 })
    return { run, tape }
  })

/**
 * An in-memory journal with a plain append whose `nth` delta commit is answered only on `release()`
 * (`held` completes when it is being held): a cancellation can be asked for while that write is in flight.
 */
const holdingDelta = (nth: number) =>
  Effect.map(Deferred.make<void>(), (held) => {
    let deltasSeen = 0
    let heldDone: (() => void) | undefined
    const layer = Layer.effect(
      Journal.Journal,
      Effect.map(MemoryJournal.make(), (inner) => {
        const appendNow: Journal.AppendNow = (sessionId, events, effects, done) =>
          Effect.runCallback(inner.append(sessionId, events, effects), {
            onExit: (exit) => {
              if (events.some((e) => e._tag === "AssistantDelta") && ++deltasSeen === nth) {
                heldDone = () => done(exit)
                Deferred.unsafeDone(held, Exit.void)
              } else done(exit)
            }
          })
        return { ...inner, append: Journal.withAppendNow(inner.append, appendNow) }
      })
    )
    return { layer, held, release: () => heldDone?.() }
  })

/** An in-memory journal with a plain append (as the SQLite journal has), counting plain writes; `fail` fails matching writes. */
const plainJournal = (fail: (events: ReadonlyArray<TapeEvent.NewTapeEvent>) => boolean = () => false) => {
  const counts = { plain: 0, failed: 0 }
  const layer = Layer.effect(
    Journal.Journal,
    Effect.map(MemoryJournal.make(), (inner) => {
      const appendNow: Journal.AppendNow = (sessionId, events, effects, done) => {
        counts.plain++
        if (fail(events)) {
          counts.failed++
          return done(Exit.fail(new Errors.JournalError({ method: "append", message: "disk gone" })))
        }
        Effect.runCallback(inner.append(sessionId, events, effects), { onExit: done })
      }
      return { ...inner, append: Journal.withAppendNow(inner.append, appendNow) }
    })
  )
  return { counts, layer }
}

const KEY = "sk-proj-jN4HFNn8Qw2Er5Ty7Ui9Op1As3Df6Gh"

const runPaced = (
  text: ReadonlyArray<string>,
  journal: ReturnType<typeof plainJournal>,
  during?: (gateway: Gateway.Service, runId: Gateway.StartedRun["run"]["id"]) => Effect.Effect<void, unknown>
) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const caller = Caller.user("alice")
    const started = yield* gateway.sendMessage(caller, { text: "go" })
    if (during) yield* during(gateway, started.run.id)
    const run = yield* gateway.awaitRun(caller, started.run.id)
    const tape = yield* gateway.readTape(caller, started.session.id, { afterSeq: 0 })
    return { run, tape }
  }).pipe(
    Effect.provide(
      gatewayLayer({
        model: ScriptedModel.layer([{ text, delayPerDelta: "3 millis" }]),
        journal: journal.layer,
        coalesceChars: 1
      })
    )
  )

describe("the loop's paced deltas over a journal's plain append", () => {
  it.live("each delta is its own plain write; a secret split across deltas is redacted; gap-free, the end last", () =>
    Effect.gen(function* () {
      const journal = plainJournal()
      const parts = ["my key is ", KEY.slice(0, 9), KEY.slice(9, 25), KEY.slice(25), " ok", " done"]
      const { run, tape } = yield* runPaced(parts, journal)
      assert.strictEqual(run.state, "Done")
      assert.isUndefined(gapFree(tape))
      const streamed = texts(tape).join("")
      assert.notInclude(streamed, KEY.slice(9, 25))
      assert.include(streamed, "my key is ")
      assert.include(streamed, " done")
      assert.strictEqual(tape.at(-1)?._tag, "RunStateChanged")
      // Every delta (and the run's other writes) went through the plain append.
      assert.isAtLeast(journal.counts.plain, texts(tape).length)
    })
  )

  it.live("a delta whose write fails ends the run failed, nothing of it stored, the end event last", () =>
    Effect.gen(function* () {
      const journal = plainJournal((events) => events.some((e) => e._tag === "AssistantDelta"))
      const { run, tape } = yield* runPaced(["a ", "b ", "c "], journal)
      assert.strictEqual(journal.counts.failed, 1)
      assert.strictEqual(run.state, "Failed")
      assert.deepStrictEqual(texts(tape), [])
      assert.isUndefined(gapFree(tape))
      const last = tape.at(-1)
      assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Failed")
    })
  )

  it.live("a cancellation between paced deltas ends the run cancelled; no delta follows its end", () =>
    Effect.gen(function* () {
      const journal = plainJournal()
      const { run, tape } = yield* runPaced(
        Array.from({ length: 200 }, (_, i) => `w${i} `),
        journal,
        (gateway, runId) =>
          Effect.gen(function* () {
            // Until a few deltas are on the tape (a real delay per round), then cancel.
            for (let i = 0; i < 500; i++) {
              const r = yield* gateway.awaitRun(Caller.user("alice"), runId).pipe(Effect.timeoutOption("5 millis"))
              if (r._tag === "Some") return
              if (journal.counts.plain >= 5) break
            }
            yield* gateway.cancelRun(Caller.user("alice"), runId)
          })
      )
      assert.strictEqual(run.state, "Cancelled")
      assert.isUndefined(gapFree(tape))
      assert.isAbove(texts(tape).length, 0)
      assert.isBelow(texts(tape).length, 200)
      const last = tape.at(-1)
      assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Cancelled")
    })
  )

  it.live("a cancellation while a delta's plain write is in flight waits for it: the delta, then the end", () =>
    Effect.gen(function* () {
      // The third delta's commit is held until the cancellation has been asked for.
      const { layer, held, release } = yield* holdingDelta(3)
      const result = yield* cancelWhileHeld(held, release).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.layer([{ text: ["a ", "b ", "c ", "d ", "e "], delayPerDelta: "2 millis" }]),
            journal: layer,
            coalesceChars: 1
          })
        )
      )
      assert.strictEqual(result.run.state, "Cancelled")
      assert.deepStrictEqual(texts(result.tape), ["a ", "b ", "c "])
      assert.isUndefined(gapFree(result.tape))
      const last = result.tape.at(-1)
      assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Cancelled")
    })
  )
})

/** A local OpenAI-compatible server streaming `parts`, one SSE chunk every `paceMs`. */
const pacedServer = <A, E>(
  parts: ReadonlyArray<string>,
  paceMs: number,
  f: Parameters<typeof withChatServer<A, E>>[1]
) =>
  withChatServer((res) => {
    res.write(chunk({ role: "assistant", content: "" }))
    let i = 0
    const next = () => {
      if (res.destroyed) return
      if (i === parts.length) return void res.end(`${chunk({}, "stop")}data: [DONE]\n\n`)
      res.write(chunk({ content: parts[i++]! }))
      setTimeout(next, paceMs)
    }
    setTimeout(next, paceMs)
  }, f)

describe("the AI SDK adapter's paced deltas over a journal's plain append (the daemon's path)", () => {
  it.live("a secret split across streamed deltas is redacted; gap-free, the end last", () =>
    Effect.gen(function* () {
      const journal = plainJournal()
      const parts = ["my key is ", KEY.slice(0, 9), KEY.slice(9, 25), KEY.slice(25), " ok", " done"]
      const { run, tape } = yield* pacedServer(parts, 3, (local) =>
        Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const caller = Caller.user("alice")
          const started = yield* gateway.sendMessage(caller, { text: "go" })
          const run = yield* gateway.awaitRun(caller, started.run.id)
          const tape = yield* gateway.readTape(caller, started.session.id, { afterSeq: 0 })
          return { run, tape }
        }).pipe(
          Effect.provide(
            gatewayLayer({
              model: Layer.succeed(ModelProvider.ModelProvider, local.model()),
              journal: journal.layer,
              coalesceChars: 1
            })
          )
        )
      )
      assert.strictEqual(run.state, "Done")
      assert.isUndefined(gapFree(tape))
      const streamed = texts(tape).join("")
      assert.notInclude(streamed, KEY.slice(9, 25))
      assert.include(streamed, "my key is ")
      assert.include(streamed, " done")
      assert.strictEqual(tape.at(-1)?._tag, "RunStateChanged")
    })
  )

  it.live("a cancellation while a streamed delta's write is held stores that delta, then the run's end", () =>
    Effect.gen(function* () {
      const { layer, held, release } = yield* holdingDelta(2)
      const parts = Array.from({ length: 50 }, (_, i) => `w${i} `)
      const { run, tape } = yield* pacedServer(parts, 5, (local) =>
        cancelWhileHeld(held, release).pipe(
          Effect.provide(
            gatewayLayer({
              model: Layer.succeed(ModelProvider.ModelProvider, local.model()),
              journal: layer,
              coalesceChars: 1
            })
          )
        )
      )
      assert.strictEqual(run.state, "Cancelled")
      assert.isAtLeast(texts(tape).length, 2)
      assert.isBelow(texts(tape).length, 50)
      assert.isUndefined(gapFree(tape))
      const last = tape.at(-1)
      assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Cancelled")
    })
  )
})

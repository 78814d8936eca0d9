/**
 * The plain model sink (`ModelProvider.SinkNow`, `runIntoNow`, `drainNow`): a provider with
 * `streamToNow` calls the sink when an event is due and runs what it returns before the next event;
 * a provider with only `streamTo` or only `stream` (third-party) gets the same sink, lazily. The
 * agent loop's tape is the same whichever form the provider has: coalescing, redaction of a secret
 * split across deltas, the tool call's order and the event budget.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, type Layer, TestClock } from "effect"
import { Caller, Gateway, ModelProvider, ScriptedModel, type TapeEvent } from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { recordingTool } from "./helpers.js"

const texts = (n: number) => Array.from({ length: n }, (_, i) => `w${i} `)

/** The three forms a provider can have, all playing the same script. */
const forms = (script: ScriptedModel.Script) => {
  const full = () => ScriptedModel.make(script, { recordPrompts: false })
  return {
    streamToNow: (): ModelProvider.Service => full(),
    streamTo: (): ModelProvider.Service => {
      const m = full()
      return { name: m.name, stream: m.stream, ...(m.streamTo ? { streamTo: m.streamTo } : {}) }
    },
    stream: (): ModelProvider.Service => {
      const m = full()
      return { name: m.name, stream: m.stream }
    }
  }
}
const request: ModelProvider.ModelRequest = { messages: [{ role: "user", text: "go" }], tools: [] }

describe("ModelProvider.runIntoNow", () => {
  it.effect("every form runs a returned effect before the next event is handed to the sink", () =>
    Effect.gen(function* () {
      for (const [form, make] of Object.entries(forms([{ text: texts(9) }]))) {
        const log: Array<string> = []
        const sink: ModelProvider.SinkNow<never> = (event) => {
          if (event.type !== "text-delta") return undefined
          log.push(`sink ${event.text.trim()}`)
          // Every third delta needs a write; it completes after an async boundary.
          if (log.length % 3 !== 0) return undefined
          return Effect.zipRight(
            Effect.yieldNow(),
            Effect.sync(() => log.push(`wrote ${event.text.trim()}`))
          )
        }
        yield* ModelProvider.runIntoNow(make(), request, sink)
        assert.deepStrictEqual(log.slice(0, 3), ["sink w0", "sink w1", "sink w2"], form)
        assert.strictEqual(log[3], "wrote w2", form)
        assert.strictEqual(log.filter((l) => l.startsWith("sink")).length, 9, form)
        // A write always directly follows the sink call that returned it.
        for (let i = 0; i < log.length; i++) {
          if (log[i]!.startsWith("wrote")) assert.strictEqual(log[i - 1], `sink ${log[i]!.slice(6)}`, form)
        }
      }
    })
  )

  it.effect("a paced model calls the sink when the delta is due, not before", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ text: texts(3), delayPerDelta: "10 millis" }])
      let calls = 0
      const fiber = yield* Effect.fork(
        ModelProvider.runIntoNow(model, request, (event) => {
          if (event.type === "text-delta") calls++
          return undefined
        })
      )
      const seen: Array<number> = []
      for (let i = 0; i < 6; i++) {
        yield* TestClock.adjust("5 millis")
        seen.push(calls)
      }
      yield* Fiber.join(fiber)
      assert.deepStrictEqual(seen, [0, 1, 1, 2, 2, 3])
    })
  )

  it.effect("a long run of deltas the sink handles plainly still yields, and can be interrupted between them", () =>
    Effect.gen(function* () {
      const total = 100_000
      const model = ScriptedModel.make([{ text: Array.from({ length: total }, () => "x") }], { recordPrompts: false })
      let seen = 0
      const fiber = yield* Effect.fork(
        ModelProvider.runIntoNow(model, request, () => {
          seen++
          return undefined
        })
      )
      // One turn of the scheduler: the stream starts and runs until it yields to the runtime.
      yield* Effect.yieldNow()
      assert.isAbove(seen, 0)
      assert.isBelow(seen, total)
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.isBelow(seen, total)
    })
  )
})

const KEY = "sk-proj-jN4HFNn8Qw2Er5Ty7Ui9Op1As3Df6Gh"

/** A run's tape without what differs between two runs (ids, times, sequence numbers). */
const shape = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.map((e) => {
    const { sessionId: _s, runId: _r, at: _a, tapeSeq: _t, ...rest } = e as TapeEvent.TapeEvent & { runId?: unknown }
    return JSON.stringify(rest, (k, v) => (k.endsWith("Id") || k === "id" || k === "createdAt" ? "·" : v))
  })

const runWith = (model: ModelProvider.Service, options: { coalesceChars: number; maxEventsPerTurn?: number }) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const { events } = yield* gateway.startRun(Caller.user("u"), { text: "go" })
    return yield* collect(events)
  }).pipe(
    Effect.provide(
      gatewayLayer({
        model,
        tools: [recordingTool("echo", "low").tool],
        coalesceChars: options.coalesceChars,
        budgets: { maxEventsPerTurn: options.maxEventsPerTurn ?? 1000 }
      }) as Layer.Layer<Gateway.Gateway>
    )
  )

describe("the loop over each provider form", () => {
  // A secret split across deltas, then a tool call, then an answer.
  const script: ScriptedModel.Script = [
    {
      text: ["Here ", "is ", "the ", "key: ", KEY.slice(0, 9), KEY.slice(9, 20), KEY.slice(20), " done"],
      toolCalls: [{ name: "echo", args: { x: 1 } }]
    },
    { text: texts(12) }
  ]
  for (const coalesceChars of [1, 16]) {
    it.effect(`the tape is the same for streamToNow, streamTo and stream (coalesceChars ${coalesceChars})`, () =>
      Effect.gen(function* () {
        const f = forms(script)
        const now = yield* runWith(f.streamToNow(), { coalesceChars })
        const to = yield* runWith(f.streamTo(), { coalesceChars })
        const stream = yield* runWith(f.stream(), { coalesceChars })
        assert.deepStrictEqual(shape(now), shape(to))
        assert.deepStrictEqual(shape(now), shape(stream))
        const last = now.at(-1)
        assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Done")
        const deltas = now.filter((e) => e._tag === "AssistantDelta")
        assert.isAbove(deltas.length, 1)
        for (const e of deltas) assert.notInclude(JSON.stringify(e), KEY.slice(9, 20))
        // The proposal comes after every delta of its turn.
        const proposedAt = now.findIndex((e) => e._tag === "ToolProposed")
        const firstTurnDeltas = now.filter((e) => e._tag === "AssistantDelta" && e.turn === 1)
        assert.isAbove(proposedAt, now.indexOf(firstTurnDeltas.at(-1)!))
      })
    )
  }

  it.effect("the event budget fails the run the same way in every form", () =>
    Effect.gen(function* () {
      const f = forms([{ text: texts(20) }])
      const results = []
      for (const make of [f.streamToNow, f.streamTo, f.stream]) {
        const events = yield* runWith(make(), { coalesceChars: 1, maxEventsPerTurn: 5 })
        results.push(shape(events))
        const last = events.at(-1)
        assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Failed")
        assert.strictEqual(events.filter((e) => e._tag === "AssistantDelta").length, 5)
      }
      assert.deepStrictEqual(results[0], results[1])
      assert.deepStrictEqual(results[0], results[2])
    })
  )
})

describe("ModelProvider.drainNow's `more`", () => {
  it.effect("says the next event is at hand on every call but the last and the last before a yield", () =>
    Effect.gen(function* () {
      const events: Array<ModelProvider.ModelEvent> = texts(600).map((text) => ({ type: "text-delta", text }))
      const mores: Array<boolean | undefined> = []
      yield* ModelProvider.drainNow(
        events,
        (_, more) => {
          mores.push(more)
          return undefined
        },
        256
      )
      const without = mores.flatMap((m, i) => (m ? [] : [i]))
      assert.strictEqual(mores.length, 600)
      assert.deepStrictEqual(without, [255, 511, 599])
    })
  )

  it.effect("a returned effect starts a new run of `more`s after it", () =>
    Effect.gen(function* () {
      const events: Array<ModelProvider.ModelEvent> = texts(6).map((text) => ({ type: "text-delta", text }))
      const mores: Array<boolean | undefined> = []
      yield* ModelProvider.drainNow(
        events,
        (_, more) => {
          mores.push(more)
          return mores.length === 2 ? Effect.void : undefined
        },
        3
      )
      // Calls 0–1, then (after the effect) 2–4 with a yield after three plain ones, then 5.
      assert.deepStrictEqual(mores, [true, true, true, true, false, false])
    })
  )
})

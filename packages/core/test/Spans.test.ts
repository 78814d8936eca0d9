/**
 * Spans at the operations people debug, in one trace with the request that started the run.
 * Recorded with a real Effect tracer (the test kit's `recordingTracer`): every span the kernel ends is kept.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, TestClock } from "effect"
import { Caller, ScriptedModel } from "../src/index.js"
import { traced } from "../src/ports/internal/traced.js"
import { collect, recordingTracer } from "../src/testing.js"
import { recordingTool, withGateway } from "./helpers.js"

describe("spans", () => {
  it.effect(
    "a run is a child of the admission in the request's trace; model turns and tool calls are its children",
    () =>
      Effect.gen(function* () {
        const { tracer, spans } = recordingTracer()
        const { tool } = recordingTool("calc", "low")
        const model = ScriptedModel.make([{ toolCalls: [{ name: "calc", args: { x: 2 } }] }, { text: "4" }])
        yield* withGateway({ model, tools: [tool] }, (gateway) =>
          Effect.gen(function* () {
            const started = yield* gateway.startRun(Caller.user("alice"), { text: "double 2" })
            yield* collect(started.events)
          }).pipe(Effect.withSpan("client.request"))
        ).pipe(Effect.withTracer(tracer))
        const byName = (name: string) => spans.filter((s) => s.name === name)
        const request = byName("client.request")[0]!
        const run = byName("AgentLoop.run")[0]!
        assert.isDefined(run)
        const admit = byName("Gateway.admit")[0]!
        assert.strictEqual(run.traceId, request.traceId)
        assert.strictEqual(admit.parentSpanId, request.spanId)
        assert.strictEqual(run.parentSpanId, admit.spanId)
        const turns = byName("AgentLoop.modelTurn")
        assert.strictEqual(turns.length, 2)
        for (const t of turns) assert.strictEqual(t.parentSpanId, run.spanId)
        const calls = byName("AgentLoop.toolCall")
        assert.strictEqual(calls.length, 1)
        assert.strictEqual(calls[0]!.parentSpanId, run.spanId)
        assert.strictEqual(calls[0]!.attributes.get("tool"), "calc")
        const policy = byName("AgentLoop.policy")[0]!
        assert.strictEqual(policy.parentSpanId, calls[0]!.spanId)
        const execute = byName("AgentLoop.execute")[0]!
        assert.strictEqual(execute.parentSpanId, calls[0]!.spanId)
        assert.strictEqual(byName("ToolRuntime.execute")[0]!.parentSpanId, execute.spanId)
      })
  )

  it.effect("a run queued behind another in the same session joins its own request's trace", () =>
    Effect.gen(function* () {
      const { tracer, spans } = recordingTracer()
      const model = ScriptedModel.make(() => ({ text: ["slow"], delayPerDelta: "10 millis" }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const first = yield* gateway
            .sendMessage(Caller.user("alice"), { key: "same", text: "one" })
            .pipe(Effect.withSpan("request.A"))
          const second = yield* gateway
            .sendMessage(Caller.user("alice"), { key: "same", text: "two" })
            .pipe(Effect.withSpan("request.B"))
          yield* TestClock.adjust("1 second")
          yield* gateway.awaitRun(Caller.user("alice"), first.run.id)
          yield* gateway.awaitRun(Caller.user("alice"), second.run.id)
        })
      ).pipe(Effect.withTracer(tracer))
      const trace = (name: string) => spans.find((s) => s.name === name)!.traceId
      const runs = spans.filter((s) => s.name === "AgentLoop.run")
      assert.strictEqual(runs.length, 2)
      assert.deepStrictEqual(
        runs.map((r) => r.traceId),
        [trace("request.A"), trace("request.B")]
      )
    })
  )

  it.effect("the hot path's spans cost nothing without a tracer, and open as usual with one", () =>
    Effect.gen(function* () {
      const inner = traced("hot.step", { attributes: { n: 1 } })(Effect.option(Effect.currentSpan))
      // No tracer installed: no span is made (the step runs as it is).
      assert.isTrue(Option.isNone(yield* inner))
      const { tracer, spans } = recordingTracer()
      const span = yield* inner.pipe(Effect.withTracer(tracer))
      assert.strictEqual(Option.getOrUndefined(span)?.name, "hot.step")
      assert.deepStrictEqual(
        spans.map((s) => [s.name, s.attributes.get("n")]),
        [["hot.step", 1]]
      )
    })
  )
})

/**
 * Admission annotates the span it runs in with the run's session and id, and the run's span is the
 * child of that span — with a recording tracer (the `Gateway.admit` span) and with none installed
 * (then the caller's own span is the one annotated, as the daemon's request span is): admission reads
 * the span once (`internal/spanOf.ts`) instead of `annotateCurrentSpan` + `option(currentSpan)`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Tracer } from "effect"
import { Caller, ScriptedModel } from "../src/index.js"
import { collect, recordingTracer } from "../src/testing.js"
import { withGateway } from "./helpers.js"

describe("admission's span", () => {
  it.effect("with a tracer: Gateway.admit carries sessionId and runId, the run is its child", () =>
    Effect.gen(function* () {
      const { tracer, spans } = recordingTracer()
      const model = ScriptedModel.make([{ text: "hi" }])
      const started = yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const started = yield* gateway.startRun(Caller.user("alice"), { text: "hello" })
          yield* collect(started.events)
          return started
        }).pipe(Effect.withSpan("client.request"))
      ).pipe(Effect.withTracer(tracer))
      const admit = spans.find((s) => s.name === "Gateway.admit")!
      assert.strictEqual(admit.attributes.get("sessionId"), started.session.id)
      assert.strictEqual(admit.attributes.get("runId"), started.run.id)
      const run = spans.find((s) => s.name === "AgentLoop.run")!
      assert.strictEqual(run.parentSpanId, admit.spanId)
      // The caller's span is not the one annotated when admission has its own.
      assert.isUndefined(spans.find((s) => s.name === "client.request")!.attributes.get("runId"))
    })
  )

  it.effect("without a tracer: the caller's span carries them; with no span at all admission still runs", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "hi" }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const { span, started } = yield* Effect.gen(function* () {
            const span = (yield* Effect.currentSpan) as Tracer.Span
            const started = yield* gateway.startRun(Caller.user("alice"), { text: "hello" })
            yield* collect(started.events)
            return { span, started }
          }).pipe(Effect.withSpan("request"))
          assert.strictEqual(span.attributes.get("sessionId"), started.session.id)
          assert.strictEqual(span.attributes.get("runId"), started.run.id)
          // No span: nothing to annotate, and no failure escapes.
          const bare = yield* gateway.startRun(Caller.user("alice"), { text: "again", sessionId: started.session.id })
          const last = (yield* collect(bare.events)).at(-1)
          assert.strictEqual(last?._tag === "RunStateChanged" ? last.to : last?._tag, "Done")
        })
      )
    })
  )
})

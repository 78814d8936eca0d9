import { describe, expect, it } from "@effect/vitest"
import { Effect, Metric, MetricLabel } from "effect"
import * as Metrics from "../src/kernel/Metrics.js"

// `Metrics.unsafeRecord` joins its tags with the caller's labels once per (labels, tags) instead of
// per update: the series it updates must stay the ones `Metric.tagged` (and the Effect recorders) name.
describe("Metrics.unsafeRecord", () => {
  it.effect("updates the same tagged series as the Effect recorders, with and without the caller's labels", () =>
    Effect.gen(function* () {
      const tool = `metrics-test.${Math.random().toString(36).slice(2)}`
      const labels = [MetricLabel.make("agent", "a1")]
      const series = (extra: ReadonlyArray<MetricLabel.MetricLabel>) =>
        Metric.taggedWithLabels(
          Metric.tagged(Metric.tagged(Metrics.toolCallLatency, "tool", tool), "outcome", "ok"),
          extra
        )
      const count = (extra: ReadonlyArray<MetricLabel.MetricLabel>) =>
        Effect.map(Metric.value(series(extra)), (h) => h.count)

      yield* Metrics.recordToolCall(tool, "ok", 5)
      for (let i = 0; i < 3; i++) Metrics.unsafeRecord.toolCall(tool, "ok", 5, [])
      expect(yield* count([])).toBe(4)

      for (let i = 0; i < 2; i++) Metrics.unsafeRecord.toolCall(tool, "ok", 5, labels)
      // A fresh array with equal labels is the same series.
      Metrics.unsafeRecord.toolCall(tool, "ok", 5, [MetricLabel.make("agent", "a1")])
      expect(yield* count(labels)).toBe(3)
      expect(yield* count([])).toBe(4)
      // Another outcome is another series.
      Metrics.unsafeRecord.toolCall(tool, "error", 5, [])
      expect(yield* count([])).toBe(4)
      const errors = yield* Metric.value(
        Metric.tagged(Metric.tagged(Metrics.toolCallLatency, "tool", tool), "outcome", "error")
      )
      expect(errors.count).toBe(1)
    })
  )

  it.effect("counts policy decisions and run transitions in the recorders' series", () =>
    Effect.gen(function* () {
      const labels = [MetricLabel.make("run-test", Math.random().toString(36).slice(2))]
      const decisions = Metric.taggedWithLabels(Metric.tagged(Metrics.policyDecisions, "outcome", "deny"), labels)
      const transitions = Metric.taggedWithLabels(Metric.tagged(Metrics.runTransitions, "to", "Done"), labels)
      for (let i = 0; i < 3; i++) Metrics.unsafeRecord.policyDecision("deny", labels)
      Metrics.unsafeRecord.runTransition("Done", labels)
      Metrics.unsafeRecord.runTransition("Done", labels)
      expect((yield* Metric.value(decisions)).count).toBe(3)
      expect((yield* Metric.value(transitions)).count).toBe(2)
      yield* Metrics.recordPolicyDecision("deny").pipe(Effect.labelMetrics(labels))
      expect((yield* Metric.value(decisions)).count).toBe(4)
    })
  )
})

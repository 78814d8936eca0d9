/**
 * Palyra's metrics, defined once with Effect's `Metric` API so every part of the kernel and every
 * transport updates the same series. They live in Effect's global metric registry; an exporter
 * (the HTTP transport's `GET /metrics`, through `@effect/opentelemetry`) renders them.
 *
 * Names follow Prometheus conventions: durations in seconds, counters exposed with `_total`.
 *
 * | metric | kind | labels |
 * | --- | --- | --- |
 * | `palyra_run_transitions` | counter | `to` (run state) |
 * | `palyra_run_duration_seconds` | histogram | |
 * | `palyra_model_turn_seconds` | histogram | |
 * | `palyra_tool_call_seconds` | histogram | `tool`, `outcome` |
 * | `palyra_policy_decisions` | counter | `outcome` |
 * | `palyra_approvals_pending` | gauge | |
 * | `palyra_journal_append_seconds` | histogram | |
 * | `palyra_journal_batch_size` | histogram | |
 * | `palyra_open_streams` | gauge | `transport` |
 * | `palyra_event_loop_delay_seconds` | gauge | `stat` (`p50`, `p99`, `max`) |
 *
 * @since 0.1.0
 */
import { monitorEventLoopDelay } from "node:perf_hooks"
import {
  Array as Arr,
  type Duration,
  Effect,
  Metric,
  MetricBoundaries,
  MetricLabel,
  Schedule,
  type Scope,
  Stream
} from "effect"
import type { RunState } from "../domain/RunState.js"
import type { PolicyDecision } from "../domain/TapeEvent.js"

/** Latency buckets from 1 ms to about 65 s. */
const latency = MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 17 })
/** Run durations: 100 ms to about 7 hours. */
const runLength = MetricBoundaries.exponential({ start: 0.1, factor: 2, count: 18 })

/** Run state transitions, by the state entered (`to`). @since 0.1.0 @category Metrics */
export const runTransitions = Metric.counter("palyra_run_transitions", {
  description: "Run state transitions, by the state entered",
  incremental: true
})

/** Wall-clock time from a run's admission to its terminal state, in seconds. @since 0.1.0 @category Metrics */
export const runDuration = Metric.histogram(
  "palyra_run_duration_seconds",
  runLength,
  "Time from a run's admission to its end, in seconds"
)

/** Latency of one model turn (request to last streamed part), in seconds. @since 0.1.0 @category Metrics */
export const modelTurnLatency = Metric.histogram(
  "palyra_model_turn_seconds",
  latency,
  "Latency of one model turn, in seconds"
)

/** Latency of one tool execution, by `tool` and `outcome`, in seconds. @since 0.1.0 @category Metrics */
export const toolCallLatency = Metric.histogram(
  "palyra_tool_call_seconds",
  latency,
  "Latency of one tool call, by tool and outcome, in seconds"
)

/** Policy decisions, by `outcome` (`allow`, `deny`, `require_approval`). @since 0.1.0 @category Metrics */
export const policyDecisions = Metric.counter("palyra_policy_decisions", {
  description: "Policy decisions, by outcome",
  incremental: true
})

/** Approvals waiting for a decision. @since 0.1.0 @category Metrics */
export const approvalsPending = Metric.gauge("palyra_approvals_pending", {
  description: "Approvals waiting for a decision"
})

/** Latency of one journal append (one group commit), in seconds. @since 0.1.0 @category Metrics */
export const journalAppendLatency = Metric.histogram(
  "palyra_journal_append_seconds",
  latency,
  "Latency of one journal append (group commit), in seconds"
)

/** Events written by one journal group commit. @since 0.1.0 @category Metrics */
export const journalBatchSize = Metric.histogram(
  "palyra_journal_batch_size",
  MetricBoundaries.exponential({ start: 1, factor: 2, count: 12 }),
  "Events written by one journal group commit"
)

/** Event streams open to clients, by `transport` (`http`, `grpc`, …). @since 0.1.0 @category Metrics */
export const openStreams = Metric.gauge("palyra_open_streams", {
  description: "Event streams open to clients, by transport"
})

/** Event-loop delay sampled from `perf_hooks.monitorEventLoopDelay`, by `stat`, in seconds. @since 0.1.0 @category Metrics */
export const eventLoopDelay = Metric.gauge("palyra_event_loop_delay_seconds", {
  description: "Event-loop delay over the last sampling interval, by stat (p50, p99, max), in seconds"
})

const seconds = (millis: number) => millis / 1000

// A tagged metric built once per tag value: `Metric.tagged` on every update makes a new metric key
// and looks it up in the registry (hashing it) each time.
const taggedOnce = <Type, In, Out>(metric: Metric.Metric<Type, In, Out>, key: string) => {
  const byValue = new Map<string, Metric.Metric<Type, In, Out>>()
  return (value: string) => {
    let tagged = byValue.get(value)
    if (tagged === undefined) {
      tagged = Metric.tagged(metric, key, value)
      byValue.set(value, tagged)
    }
    return tagged
  }
}
const runTransitionsTo = taggedOnce(runTransitions, "to")
const policyDecisionsOf = taggedOnce(policyDecisions, "outcome")

/** Count a run entering `to`. @since 0.1.0 @category Recording */
export const recordRunTransition = (to: RunState): Effect.Effect<void> => Metric.increment(runTransitionsTo(to))

/** Record a finished run's duration. @since 0.1.0 @category Recording */
export const recordRunDuration = (millis: number): Effect.Effect<void> => Metric.update(runDuration, seconds(millis))

/** Record one model turn's latency. @since 0.1.0 @category Recording */
export const recordModelTurn = (millis: number): Effect.Effect<void> => Metric.update(modelTurnLatency, seconds(millis))

/** Record one tool call's latency and outcome. @since 0.1.0 @category Recording */
export const recordToolCall = (
  tool: string,
  outcome: "ok" | "error" | "denied" | "interrupted",
  millis: number
): Effect.Effect<void> => Metric.update(toolCallLatencyOf(tool, outcome), seconds(millis))

// Built once per tool and outcome (bounded: past 1,024 tool names a tag is built per call, as before).
const toolCallMetrics = new Map<string, Metric.Metric.Histogram<number>>()
const toolCallLatencyOf = (tool: string, outcome: string): Metric.Metric.Histogram<number> => {
  const key = `${tool}\u0000${outcome}`
  let tagged = toolCallMetrics.get(key)
  if (tagged === undefined) {
    tagged = Metric.tagged(Metric.tagged(toolCallLatency, "tool", tool), "outcome", outcome)
    if (toolCallMetrics.size < 1024) toolCallMetrics.set(key, tagged)
  }
  return tagged
}

/** Count one policy decision. @since 0.1.0 @category Recording */
export const recordPolicyDecision = (outcome: PolicyDecision): Effect.Effect<void> =>
  Metric.increment(policyDecisionsOf(outcome))

/** Set the number of pending approvals (e.g. after recovery); use `changeApprovalsPending` for deltas. @since 0.1.0 @category Recording */
export const setApprovalsPending = (count: number): Effect.Effect<void> => Metric.set(approvalsPending, count)

/** Add `delta` (+1 when an approval is requested, -1 when it is resolved or expires). @since 0.1.0 @category Recording */
export const changeApprovalsPending = (delta: number): Effect.Effect<void> => Metric.modify(approvalsPending, delta)

/** Record one journal group commit: its latency and how many events it wrote. @since 0.1.0 @category Recording */
export const recordJournalAppend = (millis: number, batchSize: number): Effect.Effect<void> =>
  Effect.zipRight(Metric.update(journalAppendLatency, seconds(millis)), Metric.update(journalBatchSize, batchSize))

/**
 * Count `stream` as an open stream of `transport` from its first pull until it ends, fails or is
 * interrupted.
 *
 * @since 0.1.0
 * @category Recording
 */
export const trackOpenStream =
  (transport: string) =>
  <A, E, R>(stream: Stream.Stream<A, E, R>): Stream.Stream<A, E, R> => {
    const gauge = Metric.tagged(openStreams, "transport", transport)
    return Stream.unwrapScoped(
      Effect.acquireRelease(Metric.modify(gauge, 1), () => Metric.modify(gauge, -1)).pipe(Effect.as(stream))
    )
  }

/**
 * Sample the event loop's delay into `eventLoopDelay` every `interval` (default 5 seconds) until
 * the scope closes. Start it once per process (the daemon does). Each sample covers the interval
 * since the last one; a stall that ends just as the sampler wakes can fall between two samples.
 *
 * @since 0.1.0
 * @category Recording
 */
export const monitorEventLoop = (
  options: { readonly interval?: Duration.DurationInput | undefined } = {}
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function* () {
    const histogram = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const h = monitorEventLoopDelay({ resolution: 10 })
        h.enable()
        return h
      }),
      (h) => Effect.sync(() => h.disable())
    )
    // The histogram counts nanoseconds.
    const stat = (name: string, nanos: number) =>
      Metric.set(Metric.tagged(eventLoopDelay, "stat", name), Number.isFinite(nanos) ? nanos / 1e9 : 0)
    const sample = Effect.suspend(() => {
      const p50 = histogram.percentile(50)
      const p99 = histogram.percentile(99)
      const max = histogram.max
      histogram.reset()
      return Effect.all([stat("p50", p50), stat("p99", p99), stat("max", max)], { discard: true })
    })
    yield* Effect.forkScoped(Effect.repeat(sample, Schedule.spaced(options.interval ?? "5 seconds")))
  })

// A tagged metric's update joins its tags and the caller's labels into a new array (`Arr.union`), and
// the base metric caches its registry hook by that array's identity: so every update through
// `Metric.tagged` missed that cache and built, hashed and looked up a new metric key (about two
// thirds of an update's cost). `labelsWith` keeps one joined array per (caller's labels, tags; the
// key names the metric too, so no two metrics' tag values can meet) —
// the same labels in the same order as `Metric.tagged`'s, so the same series — and the base metric's
// cache hits. Bounded like `toolCallMetrics`: past 1,024 tag sets per labels array it joins per call.
const joinedLabels = new WeakMap<
  ReadonlyArray<MetricLabel.MetricLabel>,
  Map<string, ReadonlyArray<MetricLabel.MetricLabel>>
>()
const labelsWith = (
  labels: ReadonlyArray<MetricLabel.MetricLabel>,
  key: string,
  tags: () => ReadonlyArray<MetricLabel.MetricLabel>
): ReadonlyArray<MetricLabel.MetricLabel> => {
  let byTags = joinedLabels.get(labels)
  if (byTags === undefined) {
    byTags = new Map()
    joinedLabels.set(labels, byTags)
  }
  let joined = byTags.get(key)
  if (joined === undefined) {
    joined = Arr.union(tags(), labels)
    if (byTags.size < 1024) byTags.set(key, joined)
  }
  return joined
}

/**
 * The loop's per-step records as plain calls, with the metric labels (`FiberRef.currentMetricLabels`)
 * its caller read once (per run): each Effect-wrapped update above costs ~4 fiber steps (a fiber-ref
 * read, a continuation, a `sync`), three of them per tool step.
 * @since 0.1.0 @category Recording
 */
export const unsafeRecord = {
  /** `recordToolCall`. */
  toolCall: (
    tool: string,
    outcome: "ok" | "error" | "denied" | "interrupted",
    millis: number,
    labels: ReadonlyArray<MetricLabel.MetricLabel>
  ): void =>
    toolCallLatency.unsafeUpdate(
      seconds(millis),
      labelsWith(labels, `tool\u0000${tool}\u0000${outcome}`, () => [
        MetricLabel.make("tool", tool),
        MetricLabel.make("outcome", outcome)
      ])
    ),
  /** `recordPolicyDecision`. */
  policyDecision: (outcome: PolicyDecision, labels: ReadonlyArray<MetricLabel.MetricLabel>): void =>
    policyDecisions.unsafeUpdate(
      1,
      labelsWith(labels, `policy\u0000${outcome}`, () => [MetricLabel.make("outcome", outcome)])
    ),
  /** `recordModelTurn`. */
  modelTurn: (millis: number, labels: ReadonlyArray<MetricLabel.MetricLabel>): void =>
    modelTurnLatency.unsafeUpdate(seconds(millis), labels),
  /** `recordRunTransition`. */
  runTransition: (to: RunState, labels: ReadonlyArray<MetricLabel.MetricLabel>): void =>
    runTransitions.unsafeUpdate(
      1,
      labelsWith(labels, `run\u0000${to}`, () => [MetricLabel.make("to", to)])
    ),
  /** `recordRunDuration`. */
  runDuration: (millis: number, labels: ReadonlyArray<MetricLabel.MetricLabel>): void =>
    runDuration.unsafeUpdate(seconds(millis), labels),
  /** `recordJournalAppend` (the journal's writer calls it per group commit, outside any fiber). */
  journalAppend: (millis: number, batchSize: number, labels: ReadonlyArray<MetricLabel.MetricLabel>): void => {
    journalAppendLatency.unsafeUpdate(seconds(millis), labels)
    journalBatchSize.unsafeUpdate(batchSize, labels)
  }
}

/**
 * Live subscribers attached to sessions' tapes (followers, streams, a run's follower opened before
 * its admission commits): a count that only grows is a leak. @since 0.1.0 @category Metrics
 */
export const tapeSubscribers = Metric.gauge("palyra_tape_subscribers", {
  description: "Live subscribers attached to sessions' tapes"
})

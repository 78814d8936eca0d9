import { Effect, type Tracer } from "effect"

/** The tracer a runtime has when none was installed: Effect's native one, whose spans nobody reads. */
const untraced = Effect.runSync(Effect.tracer)

/** Whether spans opened under `tracer` are read by anyone (it is not Effect's native default). @internal */
export const isTracing = (tracer: Tracer.Tracer): boolean => tracer !== untraced

/**
 * `Effect.withSpan` for the per-run and per-step hot path, free when no tracer is installed: then
 * the effect runs as it is (a span object, its attributes and its context hop cost ~10 µs each and
 * nobody would see them). With a tracer (OpenTelemetry in the daemon, a recording one in tests) the
 * span is opened exactly as `Effect.withSpan` would.
 * @internal
 */
export const traced =
  (name: string, options?: Tracer.SpanOptions) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.tracerWith((tracer) => (tracer === untraced ? self : Effect.withSpan(self, name, options)))

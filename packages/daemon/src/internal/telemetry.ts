/**
 * Trace export for palyrad: Effect's own OTLP/HTTP tracer (`@effect/opentelemetry/OtlpTracer`, JSON
 * encoding, batched, flushed when its scope closes) behind a parent-based ratio sampler.
 *
 * Loaded with `import()` only when `[telemetry]` names an endpoint, so a daemon without telemetry
 * never loads it.
 *
 * @since 0.1.0
 * @internal
 */
import { randomBytes } from "node:crypto"
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientError from "@effect/platform/HttpClientError"
import { type Context, Duration, Effect, type Exit, Layer, Option, Tracer } from "effect"

/** @since 0.1.0 @category Models */
export interface Options {
  /** The collector's base URL, e.g. `http://127.0.0.1:4318`; `/v1/traces` is appended. */
  readonly endpoint: string
  readonly serviceName: string
  readonly serviceVersion?: string | undefined
  /** Sent with every export (e.g. a collector's API key). */
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** Share of new traces kept (0..1); a trace started by a caller keeps the caller's decision. */
  readonly sampleRatio: number
  /** How often batches are sent (default 5 seconds). */
  readonly exportInterval?: Duration.DurationInput | undefined
  /** How long the final flush may take at shutdown (default 3 seconds). */
  readonly shutdownTimeout?: Duration.DurationInput | undefined
}

/**
 * The OTLP/HTTP traces URL for a collector's base URL (the `OTEL_EXPORTER_OTLP_ENDPOINT` rule: append
 * `/v1/traces`), unless the URL already names that path.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const tracesUrl = (endpoint: string): string => {
  const url = new URL(endpoint)
  if (!url.pathname.endsWith("/v1/traces")) url.pathname = `${url.pathname.replace(/\/+$/, "")}/v1/traces`
  return url.toString()
}

// W3C trace context: lowercase hex, not all zeros. Anything else from outside starts a new trace.
const traceIdPattern = /^(?!0{32}$)[0-9a-f]{32}$/
const spanIdPattern = /^(?!0{16}$)[0-9a-f]{16}$/

/**
 * A parent as the tracer should use it: an external parent (from a client's `traceparent` or `b3`
 * header) whose ids are not valid W3C ids is dropped, so a hostile header cannot put ids a collector
 * rejects into a batch.
 */
const trustedParent = (parent: Option.Option<Tracer.AnySpan>): Option.Option<Tracer.AnySpan> =>
  Option.filter(parent, (p) => p._tag === "Span" || (traceIdPattern.test(p.traceId) && spanIdPattern.test(p.spanId)))

/** A span that is not recorded: it carries ids (for log correlation and children) and nothing else. */
class UnsampledSpan implements Tracer.Span {
  readonly _tag = "Span"
  readonly sampled = false
  readonly traceId: string
  readonly spanId = randomBytes(8).toString("hex")
  readonly attributes = new Map<string, unknown>()
  readonly links: ReadonlyArray<Tracer.SpanLink> = []
  status: Tracer.SpanStatus
  constructor(
    readonly name: string,
    readonly parent: Option.Option<Tracer.AnySpan>,
    readonly context: Context.Context<never>,
    startTime: bigint,
    readonly kind: Tracer.SpanKind
  ) {
    this.traceId = Option.isSome(parent) ? parent.value.traceId : randomBytes(16).toString("hex")
    this.status = { _tag: "Started", startTime }
  }
  end(endTime: bigint, exit: Exit.Exit<unknown, unknown>) {
    this.status = { _tag: "Ended", startTime: this.status.startTime, endTime, exit }
  }
  attribute() {}
  event() {}
  addLinks() {}
}

/**
 * Parent-based sampling in front of a recording tracer: a span with a parent follows the parent's
 * decision (a caller's `traceparent` flags included); a new trace is kept with probability `ratio`.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const sampled = (recording: Tracer.Tracer, ratio: number): Tracer.Tracer =>
  Tracer.make({
    span(name, parent, context, links, startTime, kind, options) {
      const trusted = trustedParent(parent)
      const keep = Option.isSome(trusted) ? trusted.value.sampled : ratio >= 1 || Math.random() < ratio
      return keep
        ? recording.span(name, trusted, context, links, startTime, kind, options)
        : new UnsampledSpan(name, trusted, context, startTime, kind)
    },
    context: (f, fiber) => recording.context(f, fiber)
  })

/**
 * `fetch` with a deadline per export: a collector that accepts the connection and never answers
 * fails the request (the exporter retries, then pauses and drops spans) instead of holding batches.
 */
const exportClient = (timeout: Duration.Duration) =>
  Layer.effect(
    HttpClient.HttpClient,
    Effect.map(
      HttpClient.HttpClient,
      HttpClient.transform((effect, request) =>
        Effect.timeoutFail(effect, {
          duration: timeout,
          onTimeout: () =>
            new HttpClientError.RequestError({
              request,
              reason: "Transport",
              description: `the collector did not answer within ${Duration.format(timeout)}`
            })
        })
      )
    )
  ).pipe(Layer.provide(FetchHttpClient.layer))

/**
 * The tracer as a layer: spans go to the collector in batches; closing the layer's scope flushes
 * what is buffered.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (options: Options): Layer.Layer<never> =>
  Layer.unwrapScoped(
    Effect.map(
      OtlpTracer.make({
        url: tracesUrl(options.endpoint),
        resource: { serviceName: options.serviceName, serviceVersion: options.serviceVersion },
        headers: options.headers,
        exportInterval: options.exportInterval,
        shutdownTimeout: options.shutdownTimeout
      }),
      (recording) => Layer.setTracer(sampled(recording, options.sampleRatio))
    )
  ).pipe(Layer.provide([exportClient(Duration.seconds(10)), OtlpSerialization.layerJson]))

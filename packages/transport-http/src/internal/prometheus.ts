/**
 * Prometheus text rendering of Effect's metrics: `@effect/opentelemetry` bridges Effect's global
 * metric registry (`Metric.unsafeSnapshot`) into an OpenTelemetry `MetricProducer`, the Prometheus
 * exporter (never started as a server of its own) collects from it on demand, and its serializer
 * writes the text format.
 */
import * as OtelMetrics from "@effect/opentelemetry/Metrics"
import * as OtelResource from "@effect/opentelemetry/Resource"
import { PrometheusExporter, PrometheusSerializer } from "@opentelemetry/exporter-prometheus"
import { Effect, type Scope } from "effect"

/** A renderer of the current metrics, registered until the scope closes. @internal */
export const makeRenderer: Effect.Effect<Effect.Effect<string>, never, Scope.Scope> = Effect.gen(function* () {
  const exporter = new PrometheusExporter({ preventServerStart: true, withoutScopeInfo: true })
  const producer = yield* OtelMetrics.makeProducer.pipe(
    Effect.provide(OtelResource.layer({ serviceName: "palyra", serviceVersion: "0.1.0" }))
  )
  yield* OtelMetrics.registerProducer(producer, () => exporter)
  const serializer = new PrometheusSerializer(undefined, false, undefined, false, true)
  return Effect.promise(() => exporter.collect()).pipe(
    Effect.map(({ resourceMetrics }) => bucketsFirst(serializer.serialize(resourceMetrics)))
  )
})

const kind = (line: string, family: string) =>
  line.startsWith(`${family}_bucket`) ? 0 : line.startsWith(`${family}_sum`) ? 1 : 2
const series = (line: string) =>
  line.includes("{") ? line.slice(line.indexOf("{") + 1, line.lastIndexOf("}")).replace(/,?le="[^"]*"/, "") : ""

/**
 * The serializer writes a histogram's `_count` and `_sum` before its buckets; Prometheus client
 * libraries (and strict parsers) expect each series as buckets, then `_sum`, then `_count`.
 * Reorder within each histogram family, keeping bucket order.
 */
const bucketsFirst = (text: string): string => {
  const lines = text.split("\n")
  const out: Array<string> = []
  let family: string | undefined
  let samples: Array<string> = []
  const flush = () => {
    if (family !== undefined) {
      const f = family
      const order = new Map<string, number>()
      for (const l of samples) if (!order.has(series(l))) order.set(series(l), order.size)
      const sorted = samples
        .map((l, i) => ({ l, i }))
        .sort((a, b) => order.get(series(a.l))! - order.get(series(b.l))! || kind(a.l, f) - kind(b.l, f) || a.i - b.i)
      for (const { l } of sorted) out.push(l)
    }
    family = undefined
    samples = []
  }
  for (const line of lines) {
    const histogram = /^# TYPE (\S+) histogram$/.exec(line)
    if (line.startsWith("#")) {
      flush()
      out.push(line)
      if (histogram) family = histogram[1]
    } else if (family !== undefined && line !== "") samples.push(line)
    else {
      flush()
      out.push(line)
    }
  }
  flush()
  return out.join("\n")
}

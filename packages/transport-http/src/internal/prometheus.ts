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
    Effect.map(({ resourceMetrics }) => serializer.serialize(resourceMetrics))
  )
})

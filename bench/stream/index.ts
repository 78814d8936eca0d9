/**
 * bench/stream: events delivered over gRPC RunStream (Connect client, HTTP/2) and the latency from
 * the journal's commit of an event to its receipt by the client, with 1, 50 and 200 concurrent
 * streams. The journal is the real SQLite journal; a thin wrapper records when each append returned
 * (i.e. committed) so latency is measured on one clock, in this process.
 */

import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createClient, type Interceptor } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { type Gateway, Journal, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { SqliteJournal } from "@palyra/journal"
import { GrpcTransport, Proto } from "@palyra/transport-grpc"
import { Effect, Exit, Layer, ManagedRuntime, Scope } from "effect"
import { percentile, quick, result, round, table } from "../lib/report.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-stream-"))
const committedAt = new Map<string, number>()
const timed = Layer.effect(
  Journal.Journal,
  Effect.map(Journal.Journal, (inner) => ({
    ...inner,
    append: (sessionId, events, effects) =>
      Effect.tap(inner.append(sessionId, events, effects), (stored) =>
        Effect.sync(() => {
          const now = performance.now()
          for (const e of stored) committedAt.set(`${e.sessionId}:${e.tapeSeq}`, now)
        })
      )
  }))
).pipe(Layer.provide(SqliteJournal.layer({ filename: join(dir, "stream.db") })))

const DELTAS = quick ? 5 : 20
// Paced like a real model (5 deltas a second per stream), so latency measures delivery, not a CPU
// saturated by 200 models emitting as fast as they can.
const PACE_MS = 200
const model = ScriptedModel.make(() => ({
  text: Array.from({ length: DELTAS }, (_, i) => `word${i} `),
  delayPerDelta: `${PACE_MS} millis`
}))
const runtime = ManagedRuntime.make(
  gatewayLayer({ model, journal: timed, coalesceChars: 1 }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
const TOKEN = "bench-token-0123456789"

const main = async () => {
  const scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    GrpcTransport.serve({ port: 0, tokens: [{ token: TOKEN, principal: "bench" }] }).pipe(Scope.extend(scope))
  )
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${TOKEN}`)
    return next(req)
  }
  const client = createClient(Proto.GatewayService, createGrpcTransport({ baseUrl: url, interceptors: [auth] }))
  let round_ = 0
  const measure = async (streams: number) => {
    round_++
    const latencies: Array<number> = []
    let events = 0
    const start = performance.now()
    await Promise.all(
      Array.from({ length: streams }, async (_, i) => {
        async function* requests() {
          yield {
            action: { case: "start", value: { target: { sessionKey: `r${round_}-s${i}` }, text: "go" } }
          } as never
        }
        for await (const r of client.runStream(requests())) {
          if (r.payload.case !== "event") continue
          const received = performance.now()
          const e = r.payload.value
          const committed = committedAt.get(`${e.sessionId}:${e.tapeSeq}`)
          if (committed !== undefined) latencies.push(received - committed)
          events++
        }
      })
    )
    const elapsed = performance.now() - start
    latencies.sort((a, b) => a - b)
    return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), perSec: events / (elapsed / 1000), events }
  }
  await measure(5) // warm-up
  const one = await measure(1)
  const fifty = await measure(50)
  const many = await measure(quick ? 50 : 200)
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
  table(
    `gRPC RunStream, ${DELTAS} deltas per run paced ${PACE_MS} ms apart (latency: journal commit → client receipt)`,
    [
      {
        streams: 1,
        "events/s": Math.round(one.perSec),
        "p50 ms": round(one.p50, 3),
        "p99 ms": round(one.p99, 3),
        events: one.events
      },
      {
        streams: 50,
        "events/s": Math.round(fifty.perSec),
        "p50 ms": round(fifty.p50, 3),
        "p99 ms": round(fifty.p99, 3),
        events: fifty.events
      },
      {
        streams: quick ? 50 : 200,
        "events/s": Math.round(many.perSec),
        "p50 ms": round(many.p50, 3),
        "p99 ms": round(many.p99, 3),
        events: many.events
      }
    ]
  )
  result("stream", {
    p50Ms1: round(one.p50, 3),
    p99Ms1: round(one.p99, 3),
    p50Ms50: round(fifty.p50, 3),
    p99Ms50: round(fifty.p99, 3),
    p50Ms200: round(many.p50, 3),
    p99Ms200: round(many.p99, 3),
    eventsPerSec200: Math.round(many.perSec)
  })
}

await main()

/**
 * Trace context over gRPC: a real server on 127.0.0.1 and the Connect client; the server's runtime
 * records every ended span (an Effect `Tracer` that keeps them), so the test sees the tree a
 * collector would get.
 */
import { randomBytes } from "node:crypto"
import { createClient } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { type Gateway, type Journal, ScriptedModel, Tool } from "@palyra/core"
import { gatewayLayer, type RecordedSpan, recordingTracer } from "@palyra/core/testing"
import { Effect, Layer, ManagedRuntime, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { Proto } from "../src/index.js"
import { bearer, servedFor } from "./served.js"

const { tracer: recorder, spans: ended } = recordingTracer()

const clock = Tool.make("clock.now", {
  description: "the time",
  parameters: Schema.Struct({}),
  risk: "low",
  execute: () => Effect.succeed({ now: "12:00" })
})
const model = ScriptedModel.make((request) =>
  request.messages.at(-1)?.role === "tool" ? { text: ["It is noon."] } : { toolCalls: [{ name: "clock.now" }] }
)
const runtime = ManagedRuntime.make(
  Layer.merge(
    gatewayLayer({ model, tools: [clock] }) as Layer.Layer<Gateway.Gateway | Journal.Journal>,
    Layer.setTracer(recorder)
  )
)
const served = servedFor(runtime)

const client = () =>
  createClient(Proto.GatewayService, createGrpcTransport({ baseUrl: served.url, interceptors: [bearer()] }))

const hex = (bytes: number) => randomBytes(bytes).toString("hex")
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const waitForSpan = async (pred: (s: RecordedSpan) => boolean, what: string) => {
  for (let i = 0; i < 200; i++) {
    const found = ended.find(pred)
    if (found) return found
    await sleep(25)
  }
  throw new Error(`no span: ${what}; have ${ended.map((s) => s.name).join(", ")}`)
}

describe("gRPC requests carry the client's trace into the run", () => {
  it("RouteMessage with traceparent: server span, admission and the run's spans are in the client's trace", async () => {
    const traceId = hex(16)
    const parentId = hex(8)
    const sent = await client().routeMessage(
      { target: { sessionKey: "traced-unary" }, text: "what time is it" },
      { headers: { traceparent: `00-${traceId}-${parentId}-01` } }
    )
    const server = await waitForSpan(
      (s) => s.name === "palyra.v1.GatewayService/RouteMessage" && s.traceId === traceId,
      "the server span"
    )
    expect(server.parentSpanId).toBe(parentId)
    expect(server.kind).toBe("server")
    expect(server.attributes.get("rpc.method")).toBe("RouteMessage")
    const run = await waitForSpan(
      (s) => s.name === "AgentLoop.run" && s.attributes.get("runId") === sent.runId,
      "AgentLoop.run"
    )
    expect(run.traceId).toBe(traceId)
    const admit = ended.find((s) => s.name === "Gateway.admit" && s.traceId === traceId)
    expect(admit?.parentSpanId).toBe(server.spanId)
    const children = ended.filter((s) => s.parentSpanId === run.spanId).map((s) => s.name)
    expect(children).toContain("AgentLoop.modelTurn")
    expect(children).toContain("AgentLoop.toolCall")
  })

  it("RunStream start with traceparent: the run started on the stream joins the client's trace", async () => {
    const traceId = hex(16)
    const stream = client().runStream(
      (async function* () {
        yield { action: { case: "start" as const, value: { target: { sessionKey: "traced-stream" }, text: "time?" } } }
      })(),
      { headers: { traceparent: `00-${traceId}-${hex(8)}-01` } }
    )
    let runId = ""
    for await (const response of stream) {
      if (response.payload.case === "event") runId = response.payload.value.runId
    }
    const run = await waitForSpan(
      (s) => s.name === "AgentLoop.run" && s.attributes.get("runId") === runId,
      "the streamed run's AgentLoop.run"
    )
    expect(run.traceId).toBe(traceId)
    expect(ended.some((s) => s.name === "AgentLoop.toolCall" && s.parentSpanId === run.spanId)).toBe(true)
  })

  it("b3 headers, single and multi, are read too (any case): the server span's parent is the client's", async () => {
    const cases = (traceId: string, spanId: string) => [
      { b3: `${traceId}-${spanId}-1` },
      { "X-B3-TraceId": traceId, "X-B3-SpanId": spanId, "X-B3-Sampled": "1" }
    ]
    for (const make of [0, 1]) {
      const traceId = hex(16)
      const spanId = hex(8)
      const headers = cases(traceId, spanId)[make]!
      await client()
        .getRun({ runId: "01J00000000000000000000000" }, { headers })
        .catch(() => undefined)
      const server = await waitForSpan(
        (s) => s.name === "palyra.v1.GatewayService/GetRun" && s.traceId === traceId,
        `the GetRun span for ${JSON.stringify(headers)}`
      )
      expect(server.parentSpanId).toBe(spanId)
    }
  })

  it("malformed trace headers are ignored: the call starts a new trace", async () => {
    const bad = [
      { traceparent: `00-${"0".repeat(32)}-${hex(8)}-01` }, // all-zero trace id
      { traceparent: `00-${hex(16).toUpperCase()}-${hex(8)}-01` }, // not lowercase
      { traceparent: `00-${hex(16)}-${hex(8)}` }, // missing flags
      { traceparent: "garbage" },
      { b3: "not-hex-at-all" } // the b3 reader checks nothing
    ]
    for (const headers of bad) {
      const before = ended.length
      await client()
        .getRun({ runId: "01J00000000000000000000000" }, { headers })
        .catch(() => undefined)
      const server = await waitForSpan(
        (s) => ended.indexOf(s) >= before && s.name === "palyra.v1.GatewayService/GetRun",
        `the GetRun span for ${JSON.stringify(headers)}`
      )
      expect(server.parentSpanId).toBeUndefined()
      expect(server.traceId).toMatch(/^[0-9a-f]{32}$/)
    }
  })

  it("without trace headers each call is its own root", async () => {
    const before = ended.length
    await client()
      .getRun({ runId: "01J00000000000000000000000" })
      .catch(() => undefined)
    await client()
      .getRun({ runId: "01J00000000000000000000000" })
      .catch(() => undefined)
    await waitForSpan(
      (s) => ended.indexOf(s) >= before && s.name === "palyra.v1.GatewayService/GetRun",
      "the first GetRun span"
    )
    await sleep(50)
    const roots = ended.slice(before).filter((s) => s.name === "palyra.v1.GatewayService/GetRun")
    expect(roots).toHaveLength(2)
    expect(roots.every((s) => s.parentSpanId === undefined)).toBe(true)
    expect(roots[0]!.traceId).not.toBe(roots[1]!.traceId)
  })
})

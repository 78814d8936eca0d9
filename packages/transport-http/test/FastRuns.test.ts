/**
 * `POST /v1/runs?stream=true` is answered straight from Node (`internal/fastRuns.ts`) when it can
 * be answered exactly like the HttpApi route. Two real servers over one kernel: `serve` (with the
 * hot route) and the HttpApi app alone (`httpApp` on a plain Node server); every answer of the hot
 * route is compared with the app's for the same request, over real `fetch`.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { type Gateway, type Journal, Metrics, ScriptedModel } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { gatewayLayer, recordingTracer } from "@palyra/core/testing"
import { Effect, Exit, type Layer, ManagedRuntime, Metric, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"
import { DEFAULT_MAX_DEPTH } from "../src/internal/body.js"
import * as FastRuns from "../src/internal/fastRuns.js"

const TOKENS = [
  { token: "alice-token", principal: "alice" },
  { token: "bob-token", principal: "bob" }
]
const ALICE = { authorization: "Bearer alice-token" }
const BOB = { authorization: "Bearer bob-token" }
const MAX = 4096

const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  return last?.role === "user" && last.text === "slow"
    ? { text: ["one ", "two"], delayPerDelta: "1500 millis" }
    : { text: ["Hello ", "there", "!"] }
})
const runtime = ManagedRuntime.make(
  gatewayLayer({ model, tools: [], policy: CedarPolicy.layer() }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
let scope: Scope.CloseableScope
/** `serve`: the hot route in front of the app. */
let fast = ""
/** The HttpApi app alone. */
let app = ""
/** Only the hot route's listener: 599 for whatever it hands on. */
let only = ""
const servers: Array<Server> = []

const listen = async (server: Server) => {
  servers.push(server)
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

beforeAll(async () => {
  scope = await runtime.runPromise(Scope.make())
  const options = { tokens: TOKENS, maxBodyBytes: MAX, heartbeatSeconds: 15 }
  fast = (await runtime.runPromise(HttpTransport.serve({ port: 0, ...options }).pipe(Scope.extend(scope)))).url
  const handler = await runtime.runPromise(
    Effect.flatMap(HttpTransport.httpApp(options), NodeHttpServer.makeHandler).pipe(Scope.extend(scope))
  )
  app = await listen(createServer(handler))
  const hot = await runtime.runPromise(
    FastRuns.make(
      {
        limits: { maxBytes: MAX, maxDepth: DEFAULT_MAX_DEPTH },
        heartbeatSeconds: 15,
        ready: Effect.succeed(true),
        shutdown: Effect.never,
        chatTimeoutSeconds: 300
      },
      TOKENS
    ).pipe(Scope.extend(scope))
  )
  only = await listen(
    createServer((req, res) => {
      if (!hot(req, res)) {
        req.resume()
        res.writeHead(599).end()
      }
    })
  )
})
afterAll(async () => {
  for (const s of servers) s.closeAllConnections()
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))))
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()
})

const post = (base: string, body: string, headers: Record<string, string> = ALICE) =>
  fetch(`${base}/v1/runs?stream=true`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body
  })

/** Status, the headers a client relies on, and the JSON body of a refusal. */
const refusal = async (response: Response) => ({
  status: response.status,
  type: response.headers.get("content-type"),
  body: (await response.json()) as unknown
})

interface Frame {
  readonly id: string
  readonly event: string
  readonly data: { readonly _tag: string; readonly to?: string; readonly [k: string]: unknown }
}

/** The stream's comments and events until the run's final state change. */
const readRun = async (response: Response) => {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  const comments: Array<string> = []
  const frames: Array<Frame> = []
  while (true) {
    const { done, value } = await reader.read()
    if (done) throw new Error("the stream ended before the run did")
    buffer += decoder.decode(value, { stream: true })
    let cut = buffer.indexOf("\n\n")
    while (cut >= 0) {
      const raw = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      cut = buffer.indexOf("\n\n")
      if (raw.startsWith(": ")) {
        comments.push(raw.slice(2))
        continue
      }
      const fields = Object.fromEntries(
        raw.split("\n").map((l) => [l.slice(0, l.indexOf(": ")), l.slice(l.indexOf(": ") + 2)])
      )
      const frame = { id: fields.id!, event: fields.event!, data: JSON.parse(fields.data!) } as Frame
      frames.push(frame)
      if (frame.data._tag === "RunStateChanged" && ["Done", "Failed", "Cancelled"].includes(frame.data.to ?? "")) {
        await reader.cancel()
        return { comments, frames }
      }
    }
  }
}

/** An event without what differs between two runs (ids, times, sequence numbers). */
const shape = (frame: Frame) => {
  const { sessionId, runId, at, tapeSeq, id, ...rest } = frame.data as Record<string, unknown>
  return { event: frame.event, idIsSeq: frame.id === String(tapeSeq), ...rest }
}

describe("POST /v1/runs?stream=true from Node", () => {
  it("streams the same response as the HttpApi route: status, headers, frames", async () => {
    const [a, b] = await Promise.all([
      post(fast, JSON.stringify({ text: "hi", sessionKey: "same-fast" })),
      post(app, JSON.stringify({ text: "hi", sessionKey: "same-app" }))
    ])
    expect(a.status).toBe(200)
    expect(b.status).toBe(200)
    for (const h of ["content-type", "cache-control", "x-accel-buffering"])
      expect(a.headers.get(h)).toBe(b.headers.get(h))
    const [ra, rb] = await Promise.all([readRun(a), readRun(b)])
    expect(ra.comments).toEqual(["connected"])
    expect(ra.comments).toEqual(rb.comments)
    expect(ra.frames.map(shape)).toEqual(rb.frames.map(shape))
    expect(ra.frames.map((f) => f.event)).toContain("AssistantMessage")
    // Gap-free sequence numbers from the run's start.
    const seqs = ra.frames.map((f) => Number(f.id))
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i))
  })

  it("is taken only with a valid bearer token; without one the app answers 401 as before", async () => {
    expect((await post(only, JSON.stringify({ text: "hi" }))).status).toBe(200)
    expect((await post(only, JSON.stringify({ text: "hi" }), {})).status).toBe(599)
    expect((await post(only, JSON.stringify({ text: "hi" }), { authorization: "Bearer nope" })).status).toBe(599)
    for (const headers of [{}, { authorization: "Bearer nope" }, { authorization: "Basic YTpi" }]) {
      const [a, b] = await Promise.all([
        post(fast, JSON.stringify({ text: "hi" }), headers),
        post(app, JSON.stringify({ text: "hi" }), headers)
      ])
      const got = await refusal(a)
      expect(got.status).toBe(401)
      expect(got).toEqual(await refusal(b))
    }
  })

  it("a malformed body is a typed 400, the same one the app gives", async () => {
    const bodies = [
      JSON.stringify({ text: 5 }),
      JSON.stringify({ text: "" }),
      JSON.stringify({ text: "hi", extra: true }),
      JSON.stringify({ text: "hi", sessionId: "not-a-ulid" }),
      "{ not json",
      `${"[".repeat(100)}${"]".repeat(100)}`,
      ""
    ]
    for (const body of bodies) {
      const [a, b] = await Promise.all([post(fast, body), post(app, body)])
      const got = await refusal(a)
      expect(got.status, body).toBe(400)
      expect(got.body).toMatchObject({ code: "invalid_argument" })
      expect(got).toEqual(await refusal(b))
      // And it was the hot route that answered it.
      expect((await post(only, body)).status).toBe(400)
    }
    // Not valid UTF-8.
    const bad = new Uint8Array([0x7b, 0x22, 0x74, 0x65, 0x78, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])
    const [a, b] = await Promise.all(
      [fast, app].map((base) =>
        fetch(`${base}/v1/runs?stream=true`, {
          method: "POST",
          headers: { ...ALICE, "content-type": "application/json" },
          body: bad
        })
      )
    )
    expect(await refusal(a!)).toEqual(await refusal(b!))
    expect(a!.status).toBe(400)
  })

  it("an oversize body sent without a length is 413 and closes the connection, like the app", async () => {
    const big = JSON.stringify({ text: "x".repeat(MAX * 2) })
    const chunked = (base: string) =>
      fetch(`${base}/v1/runs?stream=true`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        // A stream body has no content-length: the limit is enforced while reading.
        body: new Blob([big]).stream(),
        duplex: "half"
      } as RequestInit)
    const [a, b] = await Promise.all([chunked(fast), chunked(app)])
    expect(a.status).toBe(413)
    expect(a.headers.get("connection")).toBe("close")
    expect(await refusal(a)).toEqual(await refusal(b))
  })

  it("a non-owner cannot stream into another's session: 404 like a session that does not exist", async () => {
    const started = await post(fast, JSON.stringify({ text: "mine", sessionKey: "alice-own" }))
    const { frames } = await readRun(started)
    const sessionId = frames[0]!.data.sessionId as string
    const [a, b] = await Promise.all([
      post(fast, JSON.stringify({ text: "yours?", sessionId }), BOB),
      post(app, JSON.stringify({ text: "yours?", sessionId }), BOB)
    ])
    const got = await refusal(a)
    expect(got.status).toBe(404)
    expect(got.body).toMatchObject({ code: "not_found" })
    expect(got).toEqual(await refusal(b))
    const missing = await refusal(
      await post(fast, JSON.stringify({ text: "x", sessionId: "01ARZ3NDEKTSV4RRFFQ69G5FAV" }), BOB)
    )
    expect(missing.body).toEqual({ ...(got.body as object), message: (missing.body as { message: string }).message })
    expect(missing.status).toBe(404)
  })

  it("hands every other request on untouched: another query, multipart, another method", async () => {
    const other = await fetch(`${only}/v1/runs?stream=false`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "hi" })
    })
    expect(other.status).toBe(599)
    const form = new FormData()
    form.set("text", "hi")
    expect((await fetch(`${only}/v1/runs?stream=true`, { method: "POST", headers: ALICE, body: form })).status).toBe(
      599
    )
    expect((await fetch(`${only}/v1/runs?stream=true`, { headers: ALICE })).status).toBe(599)
    // And through `serve`, the app answers them as before.
    const viaServe = await fetch(`${fast}/v1/runs?stream=true`, { method: "POST", headers: ALICE, body: form })
    expect(viaServe.status).toBe(200)
    await readRun(viaServe)
  })

  it("a client that goes away mid-run: its stream is closed on the server (the follower released)", async () => {
    const open = () => runtime.runPromise(Metric.value(Metric.tagged(Metrics.openStreams, "transport", "http")))
    const before = (await open()).value
    const client = new AbortController()
    const response = await fetch(`${only}/v1/runs?stream=true`, {
      method: "POST",
      headers: { "content-type": "application/json", ...ALICE },
      body: JSON.stringify({ text: "slow" }),
      signal: client.signal
    })
    expect(response.status).toBe(200)
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let text = ""
    while (!text.includes("event: UserMessage")) {
      const { done, value } = await reader.read()
      if (done) throw new Error("ended before the first events")
      text += decoder.decode(value, { stream: true })
    }
    expect((await open()).value).toBe(before + 1)
    client.abort()
    // The run goes on (1.5 s per delta); the stream must not wait for it.
    for (let i = 0; i < 100 && (await open()).value !== before; i++) await new Promise((r) => setTimeout(r, 10))
    expect((await open()).value).toBe(before)
  })

  it("sends keep-alive comments while a run is quiet and ends the stream cleanly at shutdown", async () => {
    const own = await runtime.runPromise(Scope.make())
    const { url } = await runtime.runPromise(
      HttpTransport.serve({ port: 0, tokens: TOKENS, heartbeatSeconds: 1 }).pipe(Scope.extend(own))
    )
    const response = await post(url, JSON.stringify({ text: "slow" }))
    expect(response.status).toBe(200)
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let text = ""
    while (!text.includes(": keep-alive")) {
      const { done, value } = await reader.read()
      if (done) throw new Error("ended before a keep-alive")
      text += decoder.decode(value, { stream: true })
    }
    expect(text.startsWith(": connected\n\n")).toBe(true)
    // Shut the server down mid-run: the stream ends (no reset), the socket is not left open.
    const closing = runtime.runPromise(Scope.close(own, Exit.void))
    while (true) {
      const { done, value } = await reader.read()
      if (done) break
      text += decoder.decode(value, { stream: true })
    }
    await closing
    expect(text).not.toContain("event: error")
  })
})

describe("POST /v1/runs?stream=true from Node: the request's span", () => {
  it("is a server span in the client's trace (W3C traceparent, b3, X-B3) and a root span without one", async () => {
    const { tracer, spans } = recordingTracer()
    const seen = new Set<unknown>()
    const hot = await runtime.runPromise(
      FastRuns.make(
        {
          limits: { maxBytes: MAX, maxDepth: DEFAULT_MAX_DEPTH },
          heartbeatSeconds: 15,
          ready: Effect.succeed(true),
          shutdown: Effect.never,
          chatTimeoutSeconds: 300
        },
        TOKENS
      ).pipe(Effect.withTracer(tracer), Scope.extend(scope))
    )
    const traced = await listen(
      createServer((req, res) => {
        if (!hot(req, res)) {
          req.resume()
          res.writeHead(599).end()
        }
      })
    )
    const traceId = "0af7651916cd43dd8448eb211c80319c"
    const clients: ReadonlyArray<readonly [Record<string, string>, string | undefined]> = [
      [{ traceparent: `00-${traceId}-b7ad6b7169203331-01` }, "b7ad6b7169203331"],
      [{ b3: `${traceId}-c7ad6b7169203331-1` }, "c7ad6b7169203331"],
      [{ "x-b3-traceid": traceId, "x-b3-spanid": "d7ad6b7169203331" }, "d7ad6b7169203331"],
      [{}, undefined]
    ]
    for (const [i, [headers, parent]] of clients.entries()) {
      const response = await post(traced, JSON.stringify({ text: "hi", sessionKey: `traced-${i}` }), {
        ...ALICE,
        ...headers
      })
      expect(response.status).toBe(200)
      await readRun(response)
      // The span ends once the response is done (the body's end completes the request's fiber).
      let span: (typeof spans)[number] | undefined
      for (let tries = 0; span === undefined && tries < 100; tries++) {
        span = spans.find((s) => s.name === "http.server POST" && !seen.has(s))
        if (span === undefined) await new Promise((r) => setTimeout(r, 20))
      }
      expect(span).toBeDefined()
      seen.add(span!)
      expect(span!.kind).toBe("server")
      expect(span!.parentSpanId).toBe(parent)
      if (parent !== undefined) expect(span!.traceId).toBe(traceId)
      else expect(span!.traceId).not.toBe(traceId)
    }
  })
})

/**
 * Telemetry end to end: the real palyrad process (from the TypeScript sources) exporting traces to an
 * OTLP/HTTP receiver on 127.0.0.1 (a `node:http` server taking `POST /v1/traces`, JSON encoding),
 * driven over HTTP and gRPC by clients that send a W3C `traceparent`.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { createServer, type IncomingHttpHeaders } from "node:http"
import { createRequire } from "node:module"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { GrpcTransport } from "@palyra/transport-grpc"
import { Effect, Either, Option, Tracer } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import * as Config from "../src/Config.js"
import { sampled, tracesUrl } from "../src/internal/telemetry.js"

const here = dirname(fileURLToPath(import.meta.url))
const tsx = join(dirname(createRequire(import.meta.url).resolve("tsx/package.json")), "dist/esm/index.mjs")
const palyrad = join(here, "..", "src", "bin", "palyrad-main.ts")

// ---- an OTLP/HTTP receiver -----------------------------------------------------------------------

interface Received {
  readonly method: string | undefined
  readonly path: string | undefined
  readonly headers: IncomingHttpHeaders
  readonly body: string
}
interface OtlpValue {
  readonly stringValue?: string
  readonly intValue?: string | number
  readonly boolValue?: boolean
}
interface ExportedSpan {
  readonly service: string | undefined
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: number
  readonly attributes: Record<string, OtlpValue | undefined>
}
interface OtlpRequest {
  readonly resourceSpans: ReadonlyArray<{
    readonly resource: { readonly attributes: ReadonlyArray<{ key: string; value: OtlpValue }> }
    readonly scopeSpans: ReadonlyArray<{
      readonly spans: ReadonlyArray<
        Omit<ExportedSpan, "attributes" | "service"> & {
          readonly attributes: ReadonlyArray<{ key: string; value: OtlpValue }>
        }
      >
    }>
  }>
}

const receivers: Array<{ close: () => void }> = []
/** `answer: false` makes a collector that takes requests and never answers them. */
const startReceiver = ({ answer = true } = {}) =>
  new Promise<{ url: string; requests: Array<Received>; spans: () => Array<ExportedSpan> }>((resolve) => {
    const requests: Array<Received> = []
    const server = createServer((req, res) => {
      let body = ""
      req.setEncoding("utf8")
      req.on("data", (d) => (body += d))
      req.on("end", () => {
        requests.push({ method: req.method, path: req.url, headers: req.headers, body })
        if (answer) res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    receivers.push({
      close: () => {
        server.closeAllConnections()
        server.close()
      }
    })
    server.listen(0, "127.0.0.1", () => {
      const spans = () =>
        requests
          .filter((r) => r.method === "POST" && r.path === "/v1/traces")
          .flatMap((r) => (JSON.parse(r.body) as OtlpRequest).resourceSpans)
          .flatMap((rs) => {
            const service = rs.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue
            return rs.scopeSpans.flatMap((ss) =>
              ss.spans.map((s) => ({
                ...s,
                service,
                attributes: Object.fromEntries(s.attributes.map((a) => [a.key, a.value]))
              }))
            )
          })
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, spans })
    })
  })

// ---- the daemon --------------------------------------------------------------------------------

interface Daemon {
  readonly url: string
  readonly grpcUrl: string
  readonly token: string
  readonly proc: ChildProcess
  readonly stdout: () => string
  readonly exited: Promise<number | null>
}
const running: Array<Daemon> = []
afterEach(() => {
  for (const d of running.splice(0)) if (d.proc.exitCode === null) d.proc.kill("SIGKILL")
  for (const r of receivers.splice(0)) r.close()
})

const startDaemon = (dir: string, env: Record<string, string> = {}) =>
  new Promise<Daemon>((resolve, reject) => {
    const proc = spawn(
      process.execPath,
      ["--conditions=@palyra/source", "--import", tsx, palyrad, "--port", "0", "--log-format", "json"],
      { cwd: dir, env: { ...process.env, PALYRA_GRPC_PORT: "0", ...env }, stdio: ["ignore", "pipe", "pipe"] }
    )
    let out = ""
    let err = ""
    const exited = new Promise<number | null>((r) => proc.on("exit", (code) => r(code)))
    proc.stdout!.on("data", (d) => (out += d))
    proc.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/[^\s]+)/.exec(err)
      const g = /Connect \(HTTP\/2\): (http:\/\/[^\s]+)/.exec(err)
      if (m && g) {
        const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
        const daemon = { url: m[1]!, grpcUrl: g[1]!, token, proc, stdout: () => out, exited }
        running.push(daemon)
        resolve(daemon)
      }
    })
    proc.on("exit", (code) => {
      if (!/listening on/.test(err)) reject(new Error(`palyrad exited ${code}: ${err}`))
    })
  })

const fresh = (toml: string) => {
  const dir = mkdtempSync(join(tmpdir(), "palyrad-otel-"))
  writeFileSync(join(dir, "palyra.toml"), toml)
  return dir
}

const waitFor = async <A>(f: () => A | undefined | Promise<A | undefined>, what: string, ms = 20_000): Promise<A> => {
  const end = Date.now() + ms
  while (Date.now() < end) {
    const v = await f()
    if (v !== undefined) return v
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`timed out waiting for ${what}`)
}

/** A client's span: a fresh trace id and span id, as a `traceparent` header (sampled). */
const clientSpan = () => {
  const traceId = randomBytes(16).toString("hex")
  const spanId = randomBytes(8).toString("hex")
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` }
}

// biome-ignore lint/suspicious/noExplicitAny: loosely shaped JSON from the API
type Json = any
const post = (d: Daemon, path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${d.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${d.token}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body)
  })
const runState = async (d: Daemon, runId: string): Promise<string> =>
  (
    (await (
      await fetch(`${d.url}/v1/runs/${runId}`, { headers: { authorization: `Bearer ${d.token}` } })
    ).json()) as Json
  ).state

/** Start one "what time is it" run over HTTP and one over gRPC, each under its own client span. */
const timeOverBothTransports = async (d: Daemon, done: ReadonlyArray<string>) => {
  const http = clientSpan()
  const sent: Json = await (
    await post(d, "/v1/runs", { text: "what time is it", sessionKey: "otel-http" }, { traceparent: http.traceparent })
  ).json()
  const grpc = clientSpan()
  const client = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: d.token })
  const routed = await client.gateway.routeMessage(
    { target: { sessionKey: "otel-grpc" }, text: "what time is it" },
    { headers: { traceparent: grpc.traceparent } }
  )
  for (const runId of [sent.runId as string, routed.runId]) {
    await waitFor(async () => {
      const state = await runState(d, runId)
      return done.includes(state) ? state : undefined
    }, `run ${runId} to end`)
  }
  return { http: { ...http, runId: sent.runId as string }, grpc: { ...grpc, runId: routed.runId } }
}

async function* sse(response: Response): AsyncGenerator<Json> {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  while (true) {
    const { done, value } = await reader.read()
    if (done) return
    buffer += decoder.decode(value, { stream: true })
    for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
      const data = /^data: (.*)$/m.exec(buffer.slice(0, cut))?.[1]
      buffer = buffer.slice(cut + 2)
      if (data) yield JSON.parse(data)
    }
  }
}

const str = (v: OtlpValue | undefined) => v?.stringValue

describe("palyrad telemetry", () => {
  it("exports each run's spans in the client's trace, over HTTP and gRPC, and flushes at shutdown", async () => {
    const receiver = await startReceiver()
    const d = await startDaemon(
      fresh(
        [
          "[telemetry]",
          `otlp_endpoint = "${receiver.url}"`,
          `service_name = "palyrad-e2e"`,
          `headers = { "x-collector-key" = "collector-key-0123456789" }`
        ].join("\n")
      )
    )
    const { http, grpc } = await timeOverBothTransports(d, ["Done"])

    // Exported while running (batches every few seconds), not only at shutdown.
    const runOf = (runId: string) => () =>
      receiver.spans().find((s) => s.name === "AgentLoop.run" && str(s.attributes.runId) === runId)
    const httpRun = await waitFor(runOf(http.runId), "the HTTP run's AgentLoop.run span")
    const grpcRun = await waitFor(runOf(grpc.runId), "the gRPC run's AgentLoop.run span")

    for (const [client, run] of [
      [http, httpRun],
      [grpc, grpcRun]
    ] as const) {
      expect(run.traceId).toBe(client.traceId)
      expect(run.service).toBe("palyrad-e2e")
      const inTrace = receiver.spans().filter((s) => s.traceId === client.traceId)
      const children = inTrace.filter((s) => s.parentSpanId === run.spanId)
      expect(children.map((s) => s.name)).toEqual(expect.arrayContaining(["AgentLoop.modelTurn", "AgentLoop.toolCall"]))
      expect(str(children.find((s) => s.name === "AgentLoop.toolCall")?.attributes.tool)).toBe("time.now")
      // The transport's server span hangs off the client's span (OTLP kind 2 = server).
      const server = inTrace.find((s) => s.parentSpanId === client.spanId)
      expect(server?.kind).toBe(2)
      // Every span of the run chains up to the client's span.
      const byId = new Map(inTrace.map((s) => [s.spanId, s]))
      let up: ExportedSpan | undefined = run
      while (up?.parentSpanId !== undefined && up.parentSpanId !== client.spanId) up = byId.get(up.parentSpanId)
      expect(up?.parentSpanId).toBe(client.spanId)
    }
    expect(inTraceNames(receiver.spans(), grpc.traceId)).toContain("palyra.v1.GatewayService/RouteMessage")

    const exports = receiver.requests.filter((r) => r.path === "/v1/traces")
    expect(exports.every((r) => r.headers["content-type"] === "application/json")).toBe(true)
    expect(exports.every((r) => r.headers["x-collector-key"] === "collector-key-0123456789")).toBe(true)
    // The bearer token the client sent never leaves in a span.
    expect(exports.some((r) => r.body.includes(d.token))).toBe(false)

    // A run parked waiting for approval: its span only ends when SIGTERM interrupts it, so it can
    // only reach the receiver through the flush at shutdown.
    const parked = clientSpan()
    const response = await post(
      d,
      "/v1/runs?stream=true",
      { text: "write a note", sessionKey: "otel-parked" },
      { traceparent: parked.traceparent }
    )
    let parkedRunId = ""
    for await (const event of sse(response)) {
      if (event._tag === "ApprovalRequested") {
        parkedRunId = event.runId
        break
      }
    }
    expect(receiver.spans().some((s) => s.traceId === parked.traceId && s.name === "AgentLoop.run")).toBe(false)
    d.proc.kill("SIGTERM")
    expect(await d.exited).toBe(0)
    const parkedRun = receiver
      .spans()
      .find((s) => s.name === "AgentLoop.run" && str(s.attributes.runId) === parkedRunId)
    expect(parkedRun?.traceId).toBe(parked.traceId)
    expect(receiver.spans().some((s) => s.name === "AgentLoop.approvalWait" && s.traceId === parked.traceId)).toBe(true)
  }, 90_000)

  it("a collector that never answers holds up neither runs nor shutdown", async () => {
    const silent = await startReceiver({ answer: false })
    // palyrad exits 1 when shutting down takes longer than shutdown_timeout_seconds.
    const d = await startDaemon(fresh(`shutdown_timeout_seconds = 8\n[telemetry]\notlp_endpoint = "${silent.url}"\n`))
    const { http, grpc } = await timeOverBothTransports(d, ["Done"])
    expect(http.runId).not.toBe(grpc.runId)
    d.proc.kill("SIGTERM")
    expect(await d.exited).toBe(0)
    // The final flush was attempted (and given up on).
    expect(silent.requests.some((r) => r.path === "/v1/traces" && r.body.includes(http.traceId))).toBe(true)
  }, 90_000)

  it("without [telemetry] nothing is sent; JSON log lines still carry the client's trace id", async () => {
    const receiver = await startReceiver()
    // One model turn only: the "what time is it" run fails on its second turn and logs "run failed"
    // from inside its span. The standard OTel variables alone do not turn export on.
    const d = await startDaemon(fresh("[budgets]\nmax_model_turns = 1\n"), {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_TRACES_EXPORTER: "otlp"
    })
    const { http, grpc } = await timeOverBothTransports(d, ["Failed"])
    d.proc.kill("SIGTERM")
    expect(await d.exited).toBe(0)
    expect(receiver.requests).toHaveLength(0)

    const lines: Array<Json> = d
      .stdout()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l))
    for (const client of [http, grpc]) {
      const failed = lines.find(
        (l) => JSON.stringify(l.message).includes("run failed") && JSON.stringify(l.message).includes(client.runId)
      )
      expect(failed?.annotations.traceId).toBe(client.traceId)
      expect(failed?.annotations.spanId).toMatch(/^[0-9a-f]{16}$/)
    }
    // Outside a span a line carries no trace ids.
    const ready = lines.find((l) => JSON.stringify(l.message).includes("palyrad ready"))
    expect(ready?.annotations.traceId).toBeUndefined()
  }, 90_000)
})

const inTraceNames = (spans: ReadonlyArray<ExportedSpan>, traceId: string) =>
  spans.filter((s) => s.traceId === traceId).map((s) => s.name)

describe("[telemetry] configuration", () => {
  const load = (toml: string, env: Record<string, string> = {}) => {
    const dir = fresh(toml)
    return Effect.runSync(Effect.either(Config.load({}, env, dir)))
  }
  const message = (result: Either.Either<Config.Config, Config.ConfigError>) =>
    Either.isLeft(result) ? result.left.message : "(loaded)"

  it("is off by default; PALYRA_OTLP_ENDPOINT turns it on; defaults fill the rest", () => {
    const off = load("")
    expect(Either.isRight(off) && off.right.telemetry).toEqual({
      service_name: "palyrad",
      headers: {},
      sample_ratio: 1
    })
    const on = load("[telemetry]\nsample_ratio = 0.25\n", { PALYRA_OTLP_ENDPOINT: "http://127.0.0.1:4318" })
    expect(Either.isRight(on) && on.right.telemetry).toEqual({
      otlp_endpoint: "http://127.0.0.1:4318",
      service_name: "palyrad",
      headers: {},
      sample_ratio: 0.25
    })
    const env = load(`[telemetry]\notlp_endpoint = "http://file:4318"\n`, { PALYRA_OTLP_ENDPOINT: "https://env:4318" })
    expect(Either.isRight(env) && env.right.telemetry.otlp_endpoint).toBe("https://env:4318")
  })

  it("refuses bad values with a message naming the key", () => {
    expect(message(load(`[telemetry]\notlp_endpoint = "ftp://127.0.0.1"\n`))).toMatch(
      /^telemetry\.otlp_endpoint: must be an http/
    )
    expect(message(load(`[telemetry]\notlp_endpoint = "not a url"\n`))).toMatch(/^telemetry\.otlp_endpoint:/)
    expect(message(load(`[telemetry]\notlp_endpoint = "http://user:pw@127.0.0.1:4318"\n`))).toMatch(
      /telemetry\.otlp_endpoint: must not carry credentials/
    )
    expect(message(load("[telemetry]\nsample_ratio = 1.5\n"))).toMatch(
      /^telemetry\.sample_ratio: must be a number from 0 to 1/
    )
    expect(message(load("[telemetry]\nsample_ratio = nan\n"))).toMatch(/^telemetry\.sample_ratio:/)
    expect(message(load(`[telemetry]\nheaders = { "bad header" = "x" }\n`))).toMatch(
      /^telemetry\.headers\.bad header: must be a valid HTTP header name/
    )
    expect(message(load(`[telemetry]\nheaders = { "x-key" = "line\\nbreak" }\n`))).toMatch(
      /^telemetry\.headers\.x-key: must be a valid HTTP header value/
    )
    expect(message(load("[telemetry]\nendpoint = 1\n"))).toMatch(/^telemetry\.endpoint: unknown setting/)
  })

  it("appends /v1/traces to the collector's base URL", () => {
    expect(tracesUrl("http://127.0.0.1:4318")).toBe("http://127.0.0.1:4318/v1/traces")
    expect(tracesUrl("https://collector.example/otlp/")).toBe("https://collector.example/otlp/v1/traces")
    expect(tracesUrl("http://127.0.0.1:4318/v1/traces")).toBe("http://127.0.0.1:4318/v1/traces")
  })
})

describe("sampling", () => {
  /** A tracer that counts the spans it was asked to record. */
  const recording = () => {
    const names: Array<string> = []
    const tracer = Tracer.make({
      span: (name, parent, context, links, startTime, kind) => {
        names.push(name)
        return makeSpan(name, parent, context, links, startTime, kind)
      },
      context: (f) => f()
    })
    return { names, tracer }
  }
  const external = (traceId: string, spanId: string, isSampled: boolean) =>
    Tracer.externalSpan({ traceId, spanId, sampled: isSampled })
  const spanIn = (tracer: Tracer.Tracer, parent?: Tracer.AnySpan) =>
    Effect.runSync(
      Effect.currentSpan.pipe(
        Effect.withSpan("op", parent === undefined ? {} : { parent }),
        Effect.orDie,
        Effect.withTracer(tracer)
      )
    )

  it("follows the caller's decision; keeps new traces at the configured ratio", () => {
    const none = recording()
    const off = sampled(none.tracer, 0)
    const traceId = randomBytes(16).toString("hex")
    const kept = spanIn(off, external(traceId, randomBytes(8).toString("hex"), true))
    expect(kept.sampled && kept.traceId === traceId).toBe(true)
    const dropped = spanIn(off, external(traceId, randomBytes(8).toString("hex"), false))
    expect(dropped.sampled).toBe(false)
    expect(dropped.traceId).toBe(traceId)
    const root = spanIn(off)
    expect(root.sampled).toBe(false)
    expect(root.traceId).toMatch(/^[0-9a-f]{32}$/)
    expect(spanIn(off, root).sampled).toBe(false)
    expect(none.names).toEqual(["op"])

    const half = recording()
    const halfTracer = sampled(half.tracer, 0.5)
    for (let i = 0; i < 2000; i++) spanIn(halfTracer)
    // Binomial(2000, 0.5): sd ≈ 22, so 850..1150 is a 6-sd band.
    expect(half.names.length).toBeGreaterThan(850)
    expect(half.names.length).toBeLessThan(1150)
  })

  it("a malformed external parent (e.g. an unchecked b3 header) starts a new trace", () => {
    const all = recording()
    const on = sampled(all.tracer, 1)
    for (const [traceId, spanId] of [
      ["foo", "bar"],
      ["0".repeat(32), randomBytes(8).toString("hex")],
      [randomBytes(16).toString("hex").toUpperCase(), randomBytes(8).toString("hex")]
    ] as const) {
      const span = spanIn(on, external(traceId, spanId, true))
      expect(span.traceId).not.toBe(traceId)
      expect(span.traceId).toMatch(/^[0-9a-f]{32}$/)
      expect(Option.isNone(span.parent)).toBe(true)
    }
  })
})

const makeSpan = (
  name: string,
  parent: Option.Option<Tracer.AnySpan>,
  context: Tracer.Span["context"],
  links: ReadonlyArray<Tracer.SpanLink>,
  startTime: bigint,
  kind: Tracer.SpanKind
): Tracer.Span => ({
  _tag: "Span",
  name,
  traceId: Option.isSome(parent) ? parent.value.traceId : randomBytes(16).toString("hex"),
  spanId: randomBytes(8).toString("hex"),
  parent,
  context,
  status: { _tag: "Started", startTime },
  attributes: new Map(),
  links,
  sampled: true,
  kind,
  end: () => {},
  attribute: () => {},
  event: () => {},
  addLinks: () => {}
})

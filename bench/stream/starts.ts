/**
 * bench/stream/starts: a burst of concurrent streamed starts through the HttpApi routes that start a
 * run and stream it (not the hot route): `POST /v1/runs?stream=true` through the app (a multipart
 * body, which the hot route hands on) and the OpenAI `POST /v1/chat/completions` with `stream:
 * true`; and connect-es's RunStream over the Connect protocol (HTTP/2, `connect`). Measured: the run's start commit (a thin journal wrapper stamps when each append returned)
 * to the client's receipt of the response's first frame, both on the epoch clock. The gateway
 * (real SQLite journal file, `Kernel.layer` as the daemon assembles it) and `node:http` clients in
 * this process (so the client's own stalls are in the figure, alike for both builds).
 *
 * Run alone: `node --conditions=@palyra/source --import tsx bench/stream/starts.ts [--quick]`
 * (`BENCH_STARTS_N=<n>`: the burst's size, default 200; `BENCH_STARTS_ONLY=runs|chat|connect`).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { Agent, request } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createClient, type Interceptor } from "@connectrpc/connect"
import { createConnectTransport } from "@connectrpc/connect-node"
import { type Gateway, type Journal, Kernel, ScriptedModel, type TapeEvent } from "@palyra/core"
import { Proto } from "@palyra/transport-grpc"
import { type Layer, ManagedRuntime } from "effect"
import { percentile, quick, result, round, table } from "../lib/report.js"
import { serveBoth, stampedJournal } from "./served.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-starts-"))
const now = () => performance.timeOrigin + performance.now()
// When each run's first commit (its start) and each session's first commit returned.
const runStart = new Map<string, number>()
const sessionStart = new Map<string, number>()
const stamp = (stored: ReadonlyArray<TapeEvent.TapeEvent>) => {
  const t = now()
  for (const e of stored) {
    if (!sessionStart.has(e.sessionId)) sessionStart.set(e.sessionId, t)
    if (e.runId !== undefined && e.runId !== null && !runStart.has(e.runId)) runStart.set(e.runId, t)
  }
}
const timed = stampedJournal(join(dir, "starts.db"), stamp)

// Five deltas 20 ms apart: the runs of a burst overlap, as real streams do.
const model = ScriptedModel.make(() => ({ text: ["a ", "b ", "c ", "d ", "e "], delayPerDelta: "20 millis" }), {
  recordPrompts: false
})
const runtime = ManagedRuntime.make(
  Kernel.layer({ model, journal: timed, coalesceChars: 1 }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
const TOKEN = "bench-token-0123456789"
const N = Number(process.env.BENCH_STARTS_N ?? 200)
const REPEAT = quick ? 1 : 3
const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY })

/** One streamed start; resolves with the first frame's receipt time and its run/session key, then drains. */
const startOne = (base: string, route: "runs" | "chat", i: number) =>
  new Promise<{ readonly firstAt: number; readonly latency: number | undefined }>((resolve, reject) => {
    const boundary = "benchboundary"
    const body =
      route === "runs"
        ? `--${boundary}\r\ncontent-disposition: form-data; name="text"\r\n\r\nhi ${i}\r\n--${boundary}--\r\n`
        : JSON.stringify({ model: "palyra", stream: true, messages: [{ role: "user", content: `hi ${i}` }] })
    const req = request(
      `${base}${route === "runs" ? "/v1/runs?stream=true" : "/v1/chat/completions"}`,
      {
        method: "POST",
        agent,
        headers: {
          authorization: `Bearer ${TOKEN}`,
          "content-type": route === "runs" ? `multipart/form-data; boundary=${boundary}` : "application/json"
        }
      },
      (res) => {
        let first: { firstAt: number; latency: number | undefined } | undefined
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          if (first !== undefined) return
          const t = now()
          text += chunk
          // The first frame: the session's first event (runs) or the first chunk, naming the run (chat).
          const m = route === "runs" ? /"sessionId":"([^"]+)"/.exec(text) : /"id":"chatcmpl-([^"]+)"/.exec(text)
          if (m === null) return
          const committed = route === "runs" ? sessionStart.get(m[1]!) : runStart.get(m[1]!)
          first = { firstAt: t, latency: committed === undefined ? undefined : t - committed }
        })
        res.on("end", () => (first === undefined ? reject(new Error(`no first frame: ${text}`)) : resolve(first)))
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(body)
  })

const auth: Interceptor = (next) => (req) => {
  req.header.set("authorization", `Bearer ${TOKEN}`)
  return next(req)
}

/** One RunStream start over Connect, half-closed after it: its first message's receipt, then drained. */
const connectOne = async (client: ReturnType<typeof connectClient>, i: number) => {
  let first: { firstAt: number; latency: number | undefined } | undefined
  const requests = (async function* () {
    yield { action: { case: "start", value: { text: `hi ${i}` } } } as never as Proto.RunStreamRequest
  })()
  for await (const r of client.runStream(requests)) {
    if (first !== undefined) continue
    const t = now()
    const sessionId = r.payload.case === "sessionId" ? r.payload.value : undefined
    if (sessionId === undefined) throw new Error("the first message is not the session id")
    const committed = sessionStart.get(sessionId)
    first = { firstAt: t, latency: committed === undefined ? undefined : t - committed }
  }
  if (first === undefined) throw new Error("no first message")
  return first
}
const connectClient = (baseUrl: string) =>
  createClient(Proto.GatewayService, createConnectTransport({ baseUrl, httpVersion: "2", interceptors: [auth] }))

const main = async () => {
  const { grpc, http, close } = await serveBoth(runtime, [{ token: TOKEN, principal: "bench" }])
  const url = http.url
  const connect = connectClient(grpc.url)
  const one = (route: "runs" | "chat" | "connect", i: number) =>
    route === "connect" ? connectOne(connect, i) : startOne(url, route, i)
  const only = process.env.BENCH_STARTS_ONLY
  const routes = (["runs", "chat", "connect"] as const).filter((r) => only === undefined || only === r)
  const rows: Array<Record<string, string | number>> = []
  const out: Record<string, number> = {}
  // Warm-up: a few starts of each route.
  for (const route of routes) await Promise.all(Array.from({ length: 5 }, (_, i) => one(route, i)))
  for (const route of routes) {
    const p99s: Array<number> = []
    const p50s: Array<number> = []
    for (let r = 0; r < REPEAT; r++) {
      const results = await Promise.all(Array.from({ length: N }, (_, i) => one(route, i)))
      const latencies = results.flatMap((x) => (x.latency === undefined ? [] : [x.latency])).sort((a, b) => a - b)
      p99s.push(percentile(latencies, 99))
      p50s.push(percentile(latencies, 50))
      rows.push({
        route,
        run: r + 1,
        starts: N,
        measured: latencies.length,
        "commit→first p50 ms": round(percentile(latencies, 50), 1),
        "p99 ms": round(percentile(latencies, 99), 1),
        "max ms": round(latencies.at(-1) ?? 0, 1)
      })
    }
    const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
    out[`${route}FirstP99Ms`] = round(median(p99s), 1)
    out[`${route}FirstP50Ms`] = round(median(p50s), 1)
  }
  await close()
  agent.destroy()
  rmSync(dir, { recursive: true, force: true })
  table(
    `a burst of ${N} concurrent streamed starts through the HttpApi routes and Connect RunStream (latency: start commit → client's first frame/message); load ${(await import("node:os")).loadavg()[0]?.toFixed(2)}`,
    rows
  )
  result("stream-starts", { starts: N, ...out })
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})

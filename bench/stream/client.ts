/**
 * bench/stream's client, in its own process: for each scenario the parent sends (IPC), opens N
 * concurrent streams over gRPC (HTTP/2) or SSE (HTTP/1.1) — with the light clients of `light.ts`
 * (callbacks, no per-message async pipeline), or with BENCH_STREAM_CLIENT=connect the Connect
 * client speaking the gRPC protocol and `fetch` — each starting one run, and answers with every event's receipt time on the
 * epoch clock (`timeOrigin + now`, which the server's commit times use too) and the wall time.
 */

import { PerformanceObserver } from "node:perf_hooks"
import { createClient, type Interceptor } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { GrpcTransport, Proto } from "@palyra/transport-grpc"
import { Sse } from "@palyra/transport-http"
import { loopProbe } from "../lib/report.js"
import * as Light from "./light.js"

const [grpcUrl, httpUrl, token] = process.argv.slice(2) as [string, string, string]
interface Scenario {
  readonly name: string
  readonly streams: number
  readonly deltas: number
  readonly paceMs: number
  readonly wire: "grpc" | "sse"
  /** Stream i opens i × paceMs / streams ms after the first: the deltas spread over the pace, not in lockstep. */
  readonly spread?: boolean
}
const now = () => performance.timeOrigin + performance.now()
const auth: Interceptor = (next) => (req) => {
  req.header.set("authorization", `Bearer ${token}`)
  return next(req)
}
// Palyra's Node client (its HTTP/2 session has a wide connection window for many streams);
// BENCH_GRPC_WINDOW=default: connect-es's plain transport (Node's 64 KiB connection window), for A/B runs.
const client =
  process.env.BENCH_GRPC_WINDOW === "default"
    ? createClient(Proto.GatewayService, createGrpcTransport({ baseUrl: grpcUrl, interceptors: [auth] }))
    : GrpcTransport.makeClient({ baseUrl: grpcUrl, token }).gateway
/** The client's event-loop stalls over 2 ms and its GC pauses, as [start, end] on the epoch clock (`attr.ts`). */
const stallWatch = () => {
  const stalls: Array<[number, number]> = []
  const gcs: Array<[number, number]> = []
  let last = now()
  const timer = setInterval(() => {
    const t = now()
    if (t - last > 3) stalls.push([last + 1, t])
    last = t
  }, 1)
  const gc = new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      gcs.push([performance.timeOrigin + e.startTime, performance.timeOrigin + e.startTime + e.duration])
  })
  gc.observe({ entryTypes: ["gc"] })
  return {
    stop: () => {
      clearInterval(timer)
      gc.disconnect()
      return { stalls, gcs }
    }
  }
}
// The light clients (`light.ts`) by default; BENCH_STREAM_CLIENT=connect: connect-es's client and
// `fetch` with `Sse.fromResponse` (the instrument before round 13), for A/B runs.
const light = process.env.BENCH_STREAM_CLIENT !== "connect"
const lightGrpc = Light.grpcClient(grpcUrl, token)
const lightSse = Light.sseClient(httpUrl, token)
const run = async (scenario: Scenario) => {
  // The model reads how to answer from the message.
  const text = `bench ${scenario.deltas} ${scenario.paceMs}`
  const receipts: Array<[string, number]> = []
  const grpcStream = async (i: number) => {
    async function* requests() {
      yield {
        action: { case: "start", value: { target: { sessionKey: `${scenario.name}-${i}` }, text } }
      } as never
    }
    for await (const r of client.runStream(requests())) {
      if (r.payload.case !== "event") continue
      receipts.push([`${r.payload.value.sessionId}:${r.payload.value.tapeSeq}`, now()])
    }
  }
  const sseStream = async (i: number) => {
    const response = await fetch(`${httpUrl}/v1/runs?stream=true`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ text, sessionKey: `${scenario.name}-${i}` })
    })
    for await (const frame of Sse.fromResponse(response)) {
      if (frame.id === undefined) continue
      const t = now()
      const e = JSON.parse(frame.data) as { sessionId: string; tapeSeq: number; _tag: string; to?: string }
      receipts.push([`${e.sessionId}:${e.tapeSeq}`, t])
      if (e._tag === "RunStateChanged" && ["Done", "Failed", "Cancelled"].includes(e.to ?? "")) break
    }
  }
  // BENCH_STREAM_ATTR=1: this process's own CPU and event-loop lag during the scenario (`attr.ts`).
  const probe = process.env.BENCH_STREAM_ATTR === "1" ? loopProbe() : undefined
  const stalls = probe === undefined ? undefined : stallWatch()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: scenario.streams }, async (_, i) => {
      if (scenario.spread) await new Promise((r) => setTimeout(r, (i * scenario.paceMs) / scenario.streams))
      if (light) return (scenario.wire === "grpc" ? lightGrpc : lightSse).start(`${scenario.name}-${i}`, text, receipts)
      return (scenario.wire === "grpc" ? grpcStream : sseStream)(i)
    })
  )
  const elapsedMs = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const lag = probe?.stop()
  const self =
    lag === undefined
      ? undefined
      : {
          cpuUsPerEvent: (cpu.user + cpu.system) / receipts.length,
          cpuShare: (cpu.user + cpu.system) / 1000 / elapsedMs,
          loopP99Ms: lag.p99,
          loopMaxMs: lag.max,
          ...stalls!.stop()
        }
  return { elapsedMs, receipts, ...(self === undefined ? {} : { self }) }
}

process.on("message", (scenario: Scenario | "exit") => {
  if (scenario === "exit") process.exit(0)
  run(scenario).then(
    (figures) => process.send!(figures),
    (error: unknown) => {
      console.error(error)
      process.exit(1)
    }
  )
})
process.send!("ready")

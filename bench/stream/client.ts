/**
 * bench/stream's client, in its own process: for each scenario the parent sends (IPC), opens N
 * concurrent streams over gRPC (HTTP/2, the Connect client speaking the gRPC protocol) or SSE
 * (HTTP/1.1, `fetch`), each starting one run, and answers with every event's receipt time on the
 * epoch clock (`timeOrigin + now`, which the server's commit times use too) and the wall time.
 */
import { createClient, type Interceptor } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { GrpcTransport, Proto } from "@palyra/transport-grpc"
import { Sse } from "@palyra/transport-http"

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
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: scenario.streams }, async (_, i) => {
      if (scenario.spread) await new Promise((r) => setTimeout(r, (i * scenario.paceMs) / scenario.streams))
      return (scenario.wire === "grpc" ? grpcStream : sseStream)(i)
    })
  )
  return { elapsedMs: performance.now() - t0, receipts }
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

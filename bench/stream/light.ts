/**
 * bench/stream's light clients: the measuring instrument's gRPC and SSE streams without the
 * per-message async-iterable pipelines of connect-es's client and of `fetch`'s web streams.
 *
 * At 200 paced streams in lockstep, 200 events reach the client within a millisecond every pace;
 * the client process (on the same 2 cores as the server) spent ~90–130 µs of CPU per event in
 * connect-es's client pipeline (async iterables per stage, a promise per message), Node's readable
 * async iterator and undici's web streams, so the last events of each pace waited 10–20 ms in the
 * client's own event loop before being stamped — the paced p99 measured the client
 * (`bench/stream/attr.ts`, PERF-NOTES round 13 slice F). These read the same bytes off the same
 * protocols with callbacks: gRPC over one `node:http2` session (the connection window widened as
 * `GrpcTransport.makeClient` does), each message decoded in full with `@bufbuild/protobuf`'s
 * `fromBinary` and the generated schema; SSE over `node:http` (one keep-alive connection per
 * stream, as `fetch` opens), frames parsed by `eventsource-parser` (what `Sse.parse` uses) and each
 * event's data by `JSON.parse`. An event is stamped when the chunk that completed it was read.
 */
import * as http from "node:http"
import * as http2 from "node:http2"
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { Proto } from "@palyra/transport-grpc"
import { createParser } from "eventsource-parser"

const now = () => performance.timeOrigin + performance.now()
const terminal = new Set(["Done", "Failed", "Cancelled"])
// The connection window `GrpcTransport.makeClient` advertises (its `clientSession.ts`): 4 MiB.
const connectionWindowBytes = 4 * 1024 * 1024

/** A gRPC `RunStream` client on one HTTP/2 session; `start` resolves at the stream's OK trailers. */
export const grpcClient = (baseUrl: string, token: string) => {
  let session: http2.ClientHttp2Session | undefined
  const sessionOf = () => {
    if (session === undefined || session.destroyed || session.closed) {
      const s = http2.connect(baseUrl)
      s.on("error", () => undefined)
      s.on("connect", () => s.setLocalWindowSize(connectionWindowBytes))
      s.unref()
      session = s
    }
    return session
  }
  const path = `/${Proto.GatewayService.typeName}/${Proto.GatewayService.method.runStream.name}`
  const start = (sessionKey: string, text: string, receipts: Array<[string, number]>) =>
    new Promise<void>((resolve, reject) => {
      const message = toBinary(
        Proto.RunStreamRequestSchema,
        create(Proto.RunStreamRequestSchema, {
          action: { case: "start", value: { target: { sessionKey }, text } }
        } as never)
      )
      const envelope = Buffer.allocUnsafe(5 + message.length)
      envelope[0] = 0
      envelope.writeUInt32BE(message.length, 1)
      envelope.set(message, 5)
      const stream = sessionOf().request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc+proto",
        te: "trailers",
        authorization: `Bearer ${token}`
      })
      let pending: Buffer | undefined
      let status: string | undefined
      stream.on("trailers", (trailers) => {
        status = String(trailers["grpc-status"])
      })
      stream.on("data", (chunk: Buffer) => {
        const t = now()
        let b = pending === undefined ? chunk : Buffer.concat([pending, chunk])
        let p = 0
        while (p + 5 <= b.length) {
          const n = b.readUInt32BE(p + 1)
          if (p + 5 + n > b.length) break
          const m = fromBinary(Proto.RunStreamResponseSchema, b.subarray(p + 5, p + 5 + n))
          if (m.payload.case === "event") receipts.push([`${m.payload.value.sessionId}:${m.payload.value.tapeSeq}`, t])
          p += 5 + n
        }
        b = b.subarray(p)
        pending = b.length === 0 ? undefined : Buffer.from(b)
      })
      stream.on("error", reject)
      stream.on("close", () =>
        status === "0" ? resolve() : reject(new Error(`RunStream ended with grpc-status ${status ?? "none"}`))
      )
      stream.end(envelope)
    })
  return { start, close: () => session?.close() }
}

/** An SSE client (`POST /v1/runs?stream=true`); `start` resolves at the run's end event. */
export const sseClient = (baseUrl: string, token: string) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY })
  const url = new URL("/v1/runs?stream=true", baseUrl)
  const start = (sessionKey: string, text: string, receipts: Array<[string, number]>) =>
    new Promise<void>((resolve, reject) => {
      const body = JSON.stringify({ text, sessionKey })
      const req = http.request(url, {
        method: "POST",
        agent,
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body)
        }
      })
      req.on("error", reject)
      req.on("response", (res) => {
        if (res.statusCode !== 200) {
          res.resume()
          return reject(new Error(`POST /v1/runs answered ${res.statusCode}`))
        }
        let t = 0
        let ended = false
        const parser = createParser({
          onEvent: (message) => {
            if (message.id === undefined || ended) return
            const e = JSON.parse(message.data) as { sessionId: string; tapeSeq: number; _tag: string; to?: string }
            receipts.push([`${e.sessionId}:${e.tapeSeq}`, t])
            if (e._tag === "RunStateChanged" && terminal.has(e.to ?? "")) {
              ended = true
              res.destroy()
              resolve()
            }
          }
        })
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          t = now()
          parser.feed(chunk)
        })
        res.on("error", (e) => (ended ? undefined : reject(e)))
        res.on("close", () => (ended ? undefined : reject(new Error("the SSE stream closed before the run ended"))))
      })
      req.end(body)
    })
  return { start, close: () => agent.destroy() }
}

/**
 * The instrument's own check, after each scenario: every session's events arrived in `tapeSeq` order
 * with no gap or duplicate (a stream is one session's run, so its receipts must count up by one).
 * Throws on the first violation.
 */
export const checkReceipts = (receipts: ReadonlyArray<readonly [string, number]>) => {
  const last = new Map<string, number>()
  for (const [key] of receipts) {
    const colon = key.lastIndexOf(":")
    const session = key.slice(0, colon)
    const seq = Number(key.slice(colon + 1))
    const before = last.get(session)
    if (before !== undefined && seq !== before + 1)
      throw new Error(
        `bench stream: session ${session} received seq ${seq} after ${before} (a gap, duplicate or reorder)`
      )
    last.set(session, seq)
  }
}

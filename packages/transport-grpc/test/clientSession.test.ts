/**
 * The Node client's HTTP/2 connection window (`internal/clientSession.ts`): Node's default is
 * 65,535 bytes for all the streams of a session, which a few hundred `RunStream`s exhaust in one
 * burst; the client raises it once per session. Seen from a real HTTP/2 server on 127.0.0.1: its
 * remote window (the client's connection window) after the client's first request.
 */
import * as http2 from "node:http2"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { GrpcTransport } from "../src/index.js"
import { connectionWindowBytes, WideWindowSessionManager } from "../src/internal/clientSession.js"

/** A server that answers every request with the client's connection window as the server sees it. */
let server: http2.Http2Server
let baseUrl: string
const seen: Array<number> = []
beforeAll(async () => {
  server = http2.createServer()
  server.on("stream", (stream) => {
    stream.on("data", () => {})
    // The client's WINDOW_UPDATE follows its first request: poll with a real delay until it shows.
    const started = Date.now()
    const answer = () => {
      const window = stream.session?.state.remoteWindowSize ?? 0
      if (window <= 65_535 && Date.now() - started < 500) return void setTimeout(answer, 10)
      seen.push(window)
      stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true })
    }
    answer()
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(() => new Promise<void>((r) => server.close(() => r())))

describe("the client's connection window", () => {
  it("a session from WideWindowSessionManager advertises connectionWindowBytes", async () => {
    const manager = new WideWindowSessionManager(baseUrl)
    const stream = await manager.request("POST", "/x", {}, {})
    stream.end()
    for await (const _ of stream) void _
    expect(seen.at(-1)).toBeGreaterThan(connectionWindowBytes - 65_536)
    stream.session?.close()
  })

  it("Node's own default is 64 KiB (what the manager raises)", async () => {
    const session = http2.connect(baseUrl)
    const stream = session.request({ ":method": "POST", ":path": "/y" })
    stream.end()
    for await (const _ of stream) void _
    expect(seen.at(-1)).toBe(65_535)
    session.close()
  })

  it("GrpcTransport.makeClient uses it: every call's session has the wide window", async () => {
    const client = GrpcTransport.makeClient({ baseUrl, token: "t" })
    // The server answers UNIMPLEMENTED: what matters is the window it saw.
    await expect(client.health.check({})).rejects.toThrow()
    expect(seen.at(-1)).toBeGreaterThan(connectionWindowBytes - 65_536)
  })
})

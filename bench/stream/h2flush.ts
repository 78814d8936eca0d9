/**
 * bench/stream/h2flush: when do HTTP/2 DATA frames written by a Node server leave the process?
 * A server (child process) writes one 100-byte frame on each of 50 open streams, then keeps its
 * event loop busy for 20 ms (the rest of a burst's work: other streams' writes, the loops'
 * continuations); the client (this process) stamps each frame's arrival. Node's HTTP/2 session
 * sends pending frames from a native immediate after the current macrotask, and no public call
 * (`ping`, `settings`, `setLocalWindowSize`) sends them sooner, so every frame arrives after the
 * 20 ms: a RunStream frame waits for the whole macrotask that wrote it (an SSE frame, a plain socket
 * write, leaves at once). `node --import tsx bench/stream/h2flush.ts [ping]`.
 */
import { fork } from "node:child_process"
import http2 from "node:http2"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"

const STREAMS = 50
const BUSY_MS = 20

if (process.argv[2] === "server") {
  const ping = process.argv[3] === "ping"
  const streams: Array<http2.ServerHttp2Stream> = []
  const server = http2.createServer()
  server.on("stream", (s) => {
    s.respond({ ":status": 200 })
    streams.push(s)
  })
  server.listen(0, "127.0.0.1", () => process.send!({ port: (server.address() as AddressInfo).port }))
  process.on("message", (m) => {
    if (m === "exit") process.exit(0)
    const t0 = performance.timeOrigin + performance.now()
    for (const s of streams) s.write(Buffer.alloc(100))
    if (ping) streams[0]!.session?.ping(() => {})
    const end = performance.now() + BUSY_MS
    while (performance.now() < end) {
      // busy: the rest of the macrotask
    }
    process.send!({ t0 })
  })
} else {
  const child = fork(fileURLToPath(import.meta.url), ["server", process.argv[2] ?? ""], {
    execArgv: ["--import", "tsx"]
  })
  const next = <A>() => new Promise<A>((r) => child.once("message", (m) => r(m as A)))
  const { port } = await next<{ port: number }>()
  const client = http2.connect(`http://127.0.0.1:${port}`)
  const received: Array<number> = []
  await new Promise<void>((resolve) => {
    let pending = STREAMS
    for (let i = 0; i < STREAMS; i++) {
      const req = client.request({ ":path": "/", ":method": "POST" })
      req.on("response", () => --pending === 0 && resolve())
      req.on("data", () => received.push(performance.timeOrigin + performance.now()))
      req.on("error", () => {})
    }
  })
  for (let round = 0; round < 3; round++) {
    received.length = 0
    child.send("go")
    const { t0 } = await next<{ t0: number }>()
    await new Promise((r) => setTimeout(r, 30))
    received.sort((a, b) => a - b)
    console.log(
      `frames written at 0, server busy until ${BUSY_MS} ms: first arrived at ${(received[0]! - t0).toFixed(2)} ms, last at ${(received.at(-1)! - t0).toFixed(2)} ms (${received.length} frames)`
    )
  }
  client.destroy()
  child.send("exit")
}

/**
 * Backpressure on live streams: a client that stops reading its socket is cut off with a resumable
 * error once its bounded buffer is full, and never holds up another session's stream. Real server,
 * real sockets: the stalled client is a raw TCP connection that is paused (the kernel buffers fill,
 * then the server's writes wait, then the hub's buffer for it overflows).
 */
import { connect, type Socket } from "node:net"
import { ScriptedModel } from "@palyra/core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Sse from "../src/Sse.js"
import { ALICE, startServer, type TestServer } from "./fixtures.js"

// Words, not one long token: the streaming redactor holds back what could be a secret until it ends.
const DELTA = "some words ".repeat(91).slice(0, 1000)
// One flood run: 900 deltas of 1 KB (its final text stays under the journal's 1 MB event limit).
const FLOOD_DELTAS = 900
const FLOOD_RUNS = 24
const model = ScriptedModel.make((request) =>
  JSON.stringify(request.messages.at(-1)).includes("flood")
    ? { text: Array.from({ length: FLOOD_DELTAS }, () => DELTA) }
    : { text: Array.from({ length: 40 }, (_, i) => `word${i} `), delayPerDelta: "2 millis" }
)

let server: TestServer
beforeAll(async () => {
  server = await startServer({
    model,
    gateway: { coalesceChars: 1, liveBufferEvents: 64, budgets: { maxTokensPerRun: 1e9 } },
    serve: { maxBodyBytes: 64 * 1024 }
  })
})
afterAll(() => server.close())

const post = async (path: string, body: unknown) => {
  const response = await fetch(`${server.base}${path}`, {
    method: "POST",
    headers: { ...ALICE, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  expect(response.status).toBeLessThan(300)
  return response
}

/** A raw HTTP/1.1 request on a socket that is paused at once: nothing is read until `drain`. */
const stalledGet = (path: string) => {
  const socket: Socket = connect(server.port, "127.0.0.1")
  const chunks: Array<Buffer> = []
  socket.on("data", (d: Buffer) => chunks.push(d))
  socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: ${ALICE.authorization}\r\n\r\n`)
  socket.pause()
  return {
    /** Read everything the server sent until it ended the response (or the socket closed). */
    drain: () =>
      new Promise<string>((resolve) => {
        const done = () => resolve(Buffer.concat(chunks).toString("utf8"))
        const check = () => {
          // Chunked transfer: the terminating zero-length chunk ends the response.
          if (Buffer.concat(chunks).toString("utf8").endsWith("0\r\n\r\n")) {
            socket.destroy()
            done()
          }
        }
        socket.on("data", check)
        socket.on("close", done)
        socket.resume()
        check()
      })
  }
}

const tapeOf = (frames: Array<Sse.Event>) =>
  frames.filter((f) => f.id !== undefined).map((f) => JSON.parse(f.data) as { tapeSeq: number; _tag: string })

describe("backpressure", () => {
  it("cuts a stalled client off with a resumable error; another session's stream is not held up", async () => {
    // The stalled client follows session A's tape from its start.
    const first = (await (await post("/v1/runs", { text: "hello", sessionKey: "stalled" })).json()) as {
      sessionId: string
    }
    const sessionA = first.sessionId
    await server.quiet()
    const stalled = stalledGet(`/v1/sessions/${sessionA}/events?after=0`)

    // Session A floods (~22 MB of events, more than the kernel's socket buffers hold) while session
    // B's run streams to a client that reads.
    for (let i = 0; i < FLOOD_RUNS; i++) await post("/v1/runs", { text: `flood ${i}`, sessionId: sessionA })
    const other = await post("/v1/runs?stream=true", { text: "hello", sessionKey: "reader" })
    const received: Array<Sse.Event> = []
    for await (const frame of Sse.fromResponse(other)) {
      received.push(frame)
      const e = JSON.parse(frame.data) as { _tag: string; to?: string }
      if (e._tag === "RunStateChanged" && ["Done", "Failed", "Cancelled"].includes(e.to ?? "")) break
    }
    const events = tapeOf(received)
    // Everything of session B's run, gap-free, ending Done.
    expect(events.at(-1)).toMatchObject({ _tag: "RunStateChanged", to: "Done" })
    expect(events.filter((e) => e._tag === "AssistantDelta")).toHaveLength(40)
    for (let i = 1; i < events.length; i++) expect(events[i]!.tapeSeq).toBe(events[i - 1]!.tapeSeq + 1)

    await server.quiet()
    // The stalled client was cut off: what it got is gap-free and ends with the resumable error.
    const text = await stalled.drain()
    const body = text.slice(text.indexOf("\r\n\r\n") + 4)
    const frames: Array<Sse.Event> = []
    const dechunked = body.replace(/\r\n[0-9a-f]+\r\n/g, "").replace(/^[0-9a-f]+\r\n/, "")
    async function* bytes() {
      yield new TextEncoder().encode(dechunked)
    }
    for await (const f of Sse.parse(bytes())) frames.push(f)
    const error = frames.find((f) => f.event === "error")
    expect(error).toBeDefined()
    const cut = JSON.parse(error!.data) as { code: string; lastSeq: number }
    expect(cut.code).toBe("unavailable")
    const got = tapeOf(frames)
    expect(got.length).toBeGreaterThan(0)
    for (let i = 1; i < got.length; i++) expect(got[i]!.tapeSeq).toBe(got[i - 1]!.tapeSeq + 1)
    expect(got.at(-1)!.tapeSeq).toBe(cut.lastSeq)
    // Well short of the whole tape: it was cut off, not served without bound.
    const head = (await (
      await fetch(`${server.base}/v1/sessions/${sessionA}/tape?after=${cut.lastSeq}&limit=1`, { headers: ALICE })
    ).json()) as unknown
    expect(JSON.stringify(head)).toContain(`"tapeSeq":${cut.lastSeq + 1}`)

    // Resuming after lastSeq continues without gap or duplicate.
    const resumed = await fetch(`${server.base}/v1/sessions/${sessionA}/events`, {
      headers: { ...ALICE, "last-event-id": String(cut.lastSeq) }
    })
    const next: Array<Sse.Event> = []
    for await (const f of Sse.fromResponse(resumed)) {
      if (f.id === undefined) continue
      next.push(f)
      if (next.length === 100) break
    }
    expect(tapeOf(next).map((e) => e.tapeSeq)).toEqual(Array.from({ length: 100 }, (_, i) => cut.lastSeq + 1 + i))
  }, 60_000)

  it("an idle stream gets keep-alive comments, and ends cleanly when the server shuts down", async () => {
    const idle = await startServer({ model, serve: { heartbeatSeconds: 0.1 } })
    const { sessionId } = (await (
      await fetch(`${idle.base}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ text: "hello", sessionKey: "idle" })
      })
    ).json()) as { sessionId: string }
    await idle.quiet()
    const response = await fetch(`${idle.base}/v1/sessions/${sessionId}/events?after=0`, { headers: ALICE })
    const reader = response.body!.getReader()
    let text = ""
    // The tape so far, then comments while nothing happens.
    while ((text.match(/: keep-alive/g) ?? []).length < 2) {
      const { done, value } = await reader.read()
      if (done) throw new Error("ended early")
      text += new TextDecoder().decode(value)
    }
    expect(text).toContain('"to":"Done"')
    const closing = idle.close()
    // The stream ends (the body completes) rather than hanging or erroring.
    while (true) {
      const { done } = await reader.read()
      if (done) break
    }
    await closing
  }, 30_000)
})

/**
 * The direct write of `internal/runStreamWire.ts` (`DirectWrite`): what the RunStream logic writes
 * from a follower's wake-up goes out on the HTTP/2 stream in order with what it yields, and is refused
 * (nothing written) while the stream has a backlog, the handler then writing the yielded batch once
 * the client reads again. A real `node:http2` server on 127.0.0.1 running the handler, a raw
 * `node:http2` client reading the exact envelopes.
 */
import { connect, createServer, type Http2Server } from "node:http2"
import type { AddressInfo } from "node:net"
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { TapeEvent } from "@palyra/core"
import { afterEach, describe, expect, it } from "vitest"
import { Proto } from "../src/index.js"
import { toPbEvent } from "../src/internal/convert.js"
import * as RunStreamWire from "../src/internal/runStreamWire.js"

const delta = (tapeSeq: number, text = `w${tapeSeq} `): TapeEvent.TapeEvent =>
  ({
    _tag: "AssistantDelta",
    sessionId: "s1",
    runId: "r1",
    tapeSeq,
    at: 1_763_820_000_000 + tapeSeq,
    turn: 0,
    text
  }) as TapeEvent.TapeEvent

let server: Http2Server | undefined
afterEach(async () => {
  const s = server
  server = undefined
  if (s) await new Promise<void>((r) => s.close(() => r()))
})

/** Serve RunStream with `items` on 127.0.0.1; the base URL. */
const serve = async (items: RunStreamWire.HandlerOptions["items"]) => {
  const handler = RunStreamWire.makeHandler({
    readMaxBytes: 1024 * 1024,
    shutdownSignal: new AbortController().signal,
    authenticate: () => undefined,
    items,
    response: (event) => create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(event) } })
  })
  server = createServer(handler)
  const s = server
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r))
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}

/** A raw RunStream call (one `resume` request, then half-closed); `pauseAfterFirst` stops reading after the first chunk. */
const call = (url: string, options: { readonly pauseAfterFirst?: boolean } = {}) => {
  const session = connect(url, { settings: { initialWindowSize: 1024 } })
  const stream = session.request({
    ":method": "POST",
    ":path": "/palyra.v1.GatewayService/RunStream",
    "content-type": "application/grpc",
    te: "trailers"
  })
  const request = toBinary(
    Proto.RunStreamRequestSchema,
    create(Proto.RunStreamRequestSchema, { action: { case: "resume", value: { sessionId: "s1", afterSeq: 0n } } })
  )
  const body = Buffer.alloc(5 + request.length)
  body.writeUInt32BE(request.length, 1)
  body.set(request, 5)
  stream.end(body)
  const chunks: Array<Buffer> = []
  const first = new Promise<void>((resolve) => stream.once("data", () => resolve()))
  stream.on("data", (c: Buffer) => {
    chunks.push(c)
    if (options.pauseAfterFirst && chunks.length === 1) stream.pause()
  })
  const trailers = new Promise<Record<string, unknown>>((resolve) => stream.on("trailers", resolve))
  const ended = new Promise<void>((resolve) => stream.on("end", resolve))
  const received = async () => {
    const t = await trailers
    await ended
    session.close()
    const all = Buffer.concat(chunks)
    const out: Array<string> = []
    for (let at = 0; at + 5 <= all.length; ) {
      const length = all.readUInt32BE(at + 1)
      const r = fromBinary(Proto.RunStreamResponseSchema, all.subarray(at + 5, at + 5 + length))
      out.push(r.payload.case === "event" ? `e${r.payload.value.tapeSeq}` : `${r.payload.case}:${r.payload.value}`)
      at += 5 + length
    }
    return { status: t["grpc-status"], messages: out }
  }
  return { first, resume: () => stream.resume(), received }
}

describe("RunStream's direct write", () => {
  it("the direct writes of one turn go out as one write, before the trailers", async () => {
    const url = await serve(async function* (_requests, _ctx, direct) {
      yield "s1"
      // Three publications in one turn, then the generator ends at once: all of them, then the status.
      for (let seq = 1; seq <= 3; seq++) expect(direct([delta(seq)])).toBe(true)
    })
    const { status, messages } = await call(url).received()
    expect(status).toBe("0")
    expect(messages).toEqual(["sessionId:s1", "e1", "e2", "e3"])
  })

  it("a batch written directly goes out in order between the yielded items", async () => {
    const wrote: Array<boolean> = []
    const url = await serve(async function* (_requests, _ctx, direct) {
      yield "s1"
      wrote.push(direct([delta(1)]))
      yield [delta(2), delta(3)]
      wrote.push(direct([delta(4), delta(5)]))
      wrote.push(direct([delta(6)]))
      yield [delta(7)]
    })
    const { received } = call(url)
    const { status, messages } = await received()
    expect(wrote).toEqual([true, true, true])
    expect(status).toBe("0")
    expect(messages).toEqual(["sessionId:s1", "e1", "e2", "e3", "e4", "e5", "e6", "e7"])
  })

  it("counts what one turn queued: many publications before the flush are refused past the stream's high-water mark", async () => {
    let written = 0
    const url = await serve(async function* (_requests, _ctx, direct) {
      yield "s1"
      // Publications in one turn (a journal answering synchronously): nothing is flushed in between,
      // so the stream's own buffer shows no backlog yet; the queued bytes must stop it all the same.
      let seq = 1
      for (; seq <= 10_000; seq++) {
        if (!direct([delta(seq, "x".repeat(1000))])) break
        written++
      }
      yield [delta(seq)]
    })
    const { status, messages } = await call(url).received()
    // 16 KiB (the default high-water mark) of ~1 KB envelopes, not all 10,000.
    expect(written).toBeGreaterThan(0)
    expect(written).toBeLessThan(100)
    expect(status).toBe("0")
    expect(messages).toEqual(["sessionId:s1", ...Array.from({ length: written + 1 }, (_, i) => `e${i + 1}`)])
  })

  it("is refused (nothing written) while the stream has a backlog; the yielded rest follows once the client reads", async () => {
    let written = 0
    let refused = false
    let resumeClient: () => void = () => {}
    const url = await serve(async function* (_requests, _ctx, direct) {
      yield "s1"
      // The client reads nothing more (1 KiB stream window): the stream's buffer fills and direct refuses.
      // One write per turn of the event loop, as publications come (the writes of one turn are joined).
      let seq = 1
      for (; seq <= 10_000; seq++) {
        if (!direct([delta(seq, "x".repeat(1000))])) break
        written++
        await new Promise((r) => setImmediate(r))
      }
      refused = seq <= 10_000
      // What was refused is yielded instead: the handler waits for the drain, then writes it.
      resumeClient()
      yield [delta(seq, "x".repeat(1000)), delta(seq + 1)]
      // The backlog drained before that batch was written: the stream takes a direct write again.
      expect(direct([delta(seq + 2)])).toBe(true)
    })
    const c = call(url, { pauseAfterFirst: true })
    resumeClient = () => setTimeout(c.resume, 50)
    await c.first
    const { status, messages } = await c.received()
    expect(refused).toBe(true)
    expect(written).toBeGreaterThan(0)
    expect(written).toBeLessThan(100)
    expect(status).toBe("0")
    expect(messages).toEqual(["sessionId:s1", ...Array.from({ length: written + 3 }, (_, i) => `e${i + 1}`)])
  })
})

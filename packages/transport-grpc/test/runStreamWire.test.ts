/**
 * gRPC `RunStream` served by its own HTTP/2 handler (`internal/runStreamWire.ts`): real server on
 * 127.0.0.1, real clients (`@grpc/grpc-js` on the .proto files, and a raw `node:http2` client that
 * sees the exact bytes on the wire).
 */
import { type ClientHttp2Session, connect, constants } from "node:http2"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { createClient } from "@connectrpc/connect"
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node"
import * as grpc from "@grpc/grpc-js"
import * as protoLoader from "@grpc/proto-loader"
import { type Gateway, type Ids, Journal, ScriptedModel, type TapeEvent } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime } from "effect"
import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { Proto } from "../src/index.js"
import { toPbEvent } from "../src/internal/convert.js"
import * as RunStreamWire from "../src/internal/runStreamWire.js"
import { bearer, servedFor, TOKEN } from "./served.js"

const here = dirname(fileURLToPath(import.meta.url))
// "long <n>": n one-word deltas, each its own event (coalesceChars 1).
const model = ScriptedModel.make(
  (request) => {
    const n = Number(/long (\d+)/.exec(JSON.stringify(request.messages.at(-1)))?.[1] ?? 3)
    return { text: Array.from({ length: n }, (_, i) => `w${i} `) }
  },
  { recordPrompts: false }
)
const runtime = ManagedRuntime.make(
  gatewayLayer({
    model,
    coalesceChars: 1,
    budgets: { maxTokensPerRun: 1e9, maxTokensPerSession: 1e12, maxEventsPerTurn: 1e6 }
  }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
const served = servedFor(runtime)
/** The server's `host:port`, for grpc-js. */
const address = () => served.url.replace("http://", "")

const transport = () => createGrpcTransport({ baseUrl: served.url, interceptors: [bearer()] })

const definition = protoLoader.loadSync(join(here, "..", "proto", "palyra", "v1", "gateway.proto"), {
  includeDirs: [join(here, "..", "proto")],
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true
})
// biome-ignore lint/suspicious/noExplicitAny: the dynamically loaded package has no static types
const palyra = (grpc.loadPackageDefinition(definition) as any).palyra.v1
const metadata = () => {
  const m = new grpc.Metadata()
  m.set("authorization", `Bearer ${TOKEN}`)
  return m
}
type GrpcJsEvent = { tapeSeq: number; kind: string; runStateChanged?: { to: string } }

const envelopeOf = (message: Proto.RunStreamRequest) => {
  const bytes = toBinary(Proto.RunStreamRequestSchema, message)
  const out = Buffer.alloc(5 + bytes.length)
  out.writeUInt32BE(bytes.length, 1)
  out.set(bytes, 5)
  return out
}

/** Split a gRPC body into its envelopes' raw bytes (flag + length prefix included). */
const splitEnvelopes = (body: Buffer): Array<Buffer> => {
  const out: Array<Buffer> = []
  let at = 0
  while (at + 5 <= body.length) {
    const length = body.readUInt32BE(at + 1)
    if (at + 5 + length > body.length) break
    out.push(body.subarray(at, at + 5 + length))
    at += 5 + length
  }
  return out
}

/**
 * A raw HTTP/2 RunStream that resumes `sessionId` after `afterSeq` and keeps its request side open:
 * every body byte as received, until a `RunStateChanged` to DONE arrives (then it cancels).
 */
const rawResume = (session: ClientHttp2Session, sessionId: string, afterSeq: number) => {
  const stream = session.request({
    ":method": "POST",
    ":path": "/palyra.v1.GatewayService/RunStream",
    "content-type": "application/grpc",
    te: "trailers",
    authorization: `Bearer ${TOKEN}`
  })
  stream.write(
    envelopeOf(
      create(Proto.RunStreamRequestSchema, {
        action: { case: "resume", value: { sessionId, afterSeq: BigInt(afterSeq) } }
      })
    )
  )
  let headers: Record<string, unknown> = {}
  stream.on("response", (h) => {
    headers = h
  })
  const attached = new Promise<void>((resolve) => stream.once("data", () => resolve()))
  const done = new Promise<{ headers: Record<string, unknown>; envelopes: Array<Buffer> }>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    stream.on("data", (chunk: Buffer) => {
      chunks.push(chunk)
      const envelopes = splitEnvelopes(Buffer.concat(chunks))
      const last = envelopes.at(-1)
      if (last === undefined) return
      const r = fromBinary(Proto.RunStreamResponseSchema, last.subarray(5))
      if (
        r.payload.case === "event" &&
        r.payload.value.kind.case === "runStateChanged" &&
        r.payload.value.kind.value.to === Proto.RunState.DONE
      ) {
        stream.close(constants.NGHTTP2_CANCEL)
        resolve({ headers, envelopes })
      }
    })
    stream.on("error", reject)
  })
  return { attached, done }
}

describe("gRPC RunStream through its own HTTP/2 handler", () => {
  it("two live subscribers get byte-identical envelopes, equal to a fresh encode of the stored tape", async () => {
    const sessions = createClient(Proto.SessionsService, transport())
    const { session } = await sessions.resolveSession({ target: { sessionKey: "shared-bytes" } })
    const sessionId = session!.id
    const h2 = connect(served.url)
    try {
      const a = rawResume(h2, sessionId, 0)
      const b = rawResume(h2, sessionId, 0)
      // Both are attached (the session id came back) before the run starts: every event is live.
      await Promise.all([a.attached, b.attached])
      await createClient(Proto.GatewayService, transport()).routeMessage({
        target: { sessionId },
        text: "long 300"
      })
      const [ra, rb] = await Promise.all([a.done, b.done])
      expect(ra.headers[":status"]).toBe(200)
      expect(String(ra.headers["content-type"])).toMatch(/^application\/grpc/)
      // The first envelope names the session; the rest are the run's events.
      expect(fromBinary(Proto.RunStreamResponseSchema, ra.envelopes[0]!.subarray(5)).payload).toEqual({
        case: "sessionId",
        value: sessionId
      })
      const eventsA = ra.envelopes.slice(1)
      const eventsB = rb.envelopes.slice(1)
      expect(eventsA.length).toBeGreaterThan(300)
      expect(Buffer.concat(eventsB).equals(Buffer.concat(eventsA))).toBe(true)

      // A fresh encode of the same events, read back from the journal (other objects, same content).
      const journal = createClient(Proto.JournalService, transport())
      const tape = await journal.readTape({ sessionId, afterSeq: 0n, limit: 5000 })
      const fresh = tape.events.map((e) => {
        const bytes = toBinary(
          Proto.RunStreamResponseSchema,
          create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: e } })
        )
        const out = Buffer.alloc(5 + bytes.length)
        out.writeUInt32BE(bytes.length, 1)
        out.set(bytes, 5)
        return out
      })
      expect(eventsA.length).toBe(fresh.length)
      expect(eventsA.map((b) => b.toString("hex"))).toEqual(fresh.map((b) => b.toString("hex")))
    } finally {
      h2.close()
    }
  })

  it("an event's envelope is encoded once and shared: the same bytes for every caller, equal to a fresh encode", async () => {
    const g = createClient(Proto.GatewayService, transport())
    const { sessionId } = await g.routeMessage({ target: { sessionKey: "memo" }, text: "long 3" })
    const events = await runtime.runPromise(
      // The stored events as core objects (what a follower hands the transport).
      Effect.flatMap(Journal.Journal, (j) => j.readTape(sessionId as Ids.SessionId, { afterSeq: 0, limit: 100 }))
    )
    expect(events.length).toBeGreaterThan(3)
    let builds = 0
    const response = (e: (typeof events)[number]) => {
      builds++
      return create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(e) } })
    }
    const eventEnvelope = RunStreamWire.eventEnvelopes(response)
    for (const e of events) {
      const first = eventEnvelope(e)
      const second = eventEnvelope(e)
      expect(second).toBe(first)
      const bytes = toBinary(Proto.RunStreamResponseSchema, response(e))
      expect(first.readUInt32BE(1)).toBe(bytes.length)
      expect(first[0]).toBe(0)
      expect(Buffer.from(first.subarray(5)).equals(Buffer.from(bytes))).toBe(true)
    }
    // One build per event for the envelopes (streamed text is written directly), plus the fresh encodes above.
    const deltas = events.filter((e) => e._tag === "AssistantDelta").length
    expect(deltas).toBeGreaterThan(0)
    expect(builds).toBe(events.length * 2 - deltas)
  })

  it("a streamed-text envelope written by hand is byte for byte the generic encode, for any delta", () => {
    const generic = (e: TapeEvent.TapeEvent) =>
      toBinary(
        Proto.RunStreamResponseSchema,
        create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(e) } })
      )
    const text = fc.oneof(
      fc.string({ unit: "binary", maxLength: 300 }),
      fc.string({ maxLength: 5 }),
      fc.constantFrom("", "\ud800 lone", "é€😀", "x".repeat(200_000))
    )
    // Every value the generic encoder takes (seqs and times are integers; a turn is a uint32).
    const edges = [0, 1, 127, 128, 16_383, 16_384, 2 ** 31, 2 ** 32 - 1]
    const uint32 = fc.oneof(fc.constantFrom(...edges), fc.integer({ min: 0, max: 2 ** 32 - 1 }))
    const seq = fc.oneof(fc.constantFrom(...edges, 2 ** 32, Number.MAX_SAFE_INTEGER), fc.nat())
    const at = fc.oneof(
      fc.constantFrom(0, 999, 1000, 1_763_820_000_123, -1, -1500),
      fc.integer({ min: -1e15, max: 1e15 })
    )
    const delta = fc.record({
      sessionId: fc.oneof(fc.constant(""), text),
      runId: fc.oneof(fc.constant(null), text),
      tapeSeq: seq,
      at,
      turn: uint32,
      text
    })
    let fast = 0
    fc.assert(
      fc.property(delta, (d) => {
        const e = { _tag: "AssistantDelta", ...d } as unknown as TapeEvent.TapeEvent
        let generic_ = false
        const envelope = RunStreamWire.eventEnvelopes((x) => {
          generic_ = true
          return create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(x) } })
        })(e)
        if (!generic_) fast++
        const bytes = generic(e)
        expect(envelope[0]).toBe(0)
        expect(envelope.readUInt32BE(1)).toBe(bytes.length)
        expect(Buffer.from(envelope.subarray(5)).equals(Buffer.from(bytes))).toBe(true)
      }),
      { numRuns: 1000 }
    )
    // Most generated deltas took the hand-written path (the comparison is not vacuous).
    expect(fast).toBeGreaterThan(500)
  })

  it("a batch is one buffer, byte for byte the generic envelopes concatenated (ids cached per run, events shared)", async () => {
    const g = createClient(Proto.GatewayService, transport())
    const { sessionId } = await g.routeMessage({ target: { sessionKey: "batch" }, text: "long 2" })
    const stored = await runtime.runPromise(
      Effect.flatMap(Journal.Journal, (j) => j.readTape(sessionId as Ids.SessionId, { afterSeq: 0, limit: 100 }))
    )
    const others = stored.filter((e) => e._tag !== "AssistantDelta")
    expect(others.length).toBeGreaterThan(0)
    const generic = (e: TapeEvent.TapeEvent) => {
      const bytes = toBinary(
        Proto.RunStreamResponseSchema,
        create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(e) } })
      )
      const head = Buffer.alloc(5)
      head.writeUInt32BE(bytes.length, 1)
      return Buffer.concat([head, bytes])
    }
    // Few sessions and runs, so one encoder sees a session's run change and sessions interleave.
    const id = fc.constantFrom("s-1", "s-2", "sé-3", "")
    const delta = fc.record({
      _tag: fc.constant("AssistantDelta"),
      sessionId: id,
      runId: fc.constantFrom(null, "r-1", "r-2", "r😀"),
      tapeSeq: fc.nat(),
      at: fc.oneof(fc.constant(1_763_820_000_123), fc.nat()),
      turn: fc.nat(),
      text: fc.oneof(fc.string({ maxLength: 80 }), fc.string({ unit: "binary", maxLength: 80 }), fc.constant(""))
    }) as fc.Arbitrary<unknown> as fc.Arbitrary<TapeEvent.TapeEvent>
    const event = fc.oneof({ arbitrary: delta, weight: 4 }, { arbitrary: fc.constantFrom(...others), weight: 1 })
    const encode = RunStreamWire.batchEncoder((e) =>
      create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(e) } })
    )
    fc.assert(
      fc.property(fc.array(fc.array(event, { minLength: 1, maxLength: 12 }), { maxLength: 8 }), (batches) => {
        for (const batch of batches) {
          const expected = Buffer.concat(batch.map(generic))
          expect(encode(batch).equals(expected)).toBe(true)
          // Encoded again (another stream of the session: the memo), and as single events: the same bytes.
          expect(encode(batch).equals(expected)).toBe(true)
          expect(Buffer.concat(batch.map((e) => encode([e]))).equals(expected)).toBe(true)
        }
      }),
      { numRuns: 300 }
    )
  })

  it("a grpc-js client reads a long stream gap-free (gzip-compressed requests too)", async () => {
    for (const compressed of [false, true]) {
      const client = new palyra.GatewayService(
        address(),
        grpc.credentials.createInsecure(),
        compressed ? { "grpc.default_compression_algorithm": 2 } : {}
      )
      const received: Array<GrpcJsEvent> = []
      await new Promise<void>((resolve, reject) => {
        const call = client.runStream(metadata())
        call.on("data", (r: { event?: GrpcJsEvent }) => r.event && received.push(r.event))
        call.on("error", reject)
        call.on("end", () => resolve())
        call.write({ start: { target: { sessionKey: `long-${compressed}` }, text: "long 3000" } })
        call.end()
      })
      client.close()
      expect(received.length).toBeGreaterThan(3000)
      expect(received.map((e) => e.tapeSeq)).toEqual(received.map((_, i) => i + 1))
      expect(received.at(-1)).toMatchObject({ kind: "runStateChanged", runStateChanged: { to: "RUN_STATE_DONE" } })
    }
  }, 60_000)

  it("deadline, auth and a bad first message end the call with the gRPC status grpc-js expects", async () => {
    const client = new palyra.GatewayService(address(), grpc.credentials.createInsecure())
    const statusOf = (meta: grpc.Metadata, first: unknown, deadline?: number) =>
      new Promise<grpc.ServiceError>((resolve, reject) => {
        const call = client.runStream(meta, deadline === undefined ? {} : { deadline: Date.now() + deadline })
        call.on("data", () => {})
        call.on("error", resolve)
        call.on("end", () => reject(new Error("ended without an error")))
        call.write(first)
        if (deadline === undefined) call.end()
      })
    const sessions = createClient(Proto.SessionsService, transport())
    const { session } = await sessions.resolveSession({ target: { sessionKey: "deadline" } })
    // A resume that stays open with nothing to send: the deadline ends it.
    const late = await statusOf(metadata(), { resume: { sessionId: session!.id, afterSeq: 0 } }, 300)
    expect(late.code).toBe(grpc.status.DEADLINE_EXCEEDED)
    const anonymous = await statusOf(new grpc.Metadata(), { start: { target: { sessionKey: "x" }, text: "hi" } })
    expect(anonymous.code).toBe(grpc.status.UNAUTHENTICATED)
    const bad = await statusOf(metadata(), { message: "not first" })
    expect(bad.code).toBe(grpc.status.INVALID_ARGUMENT)
    expect(bad.details).toContain("must be start or resume")
    const missing = await statusOf(metadata(), { resume: { sessionId: "01KA0000000000000000000000", afterSeq: 0 } })
    expect(missing.code).toBe(grpc.status.NOT_FOUND)
    client.close()
  })

  it("a client that stops reading is cut off with a resumable UNAVAILABLE and holds up no other session", async () => {
    const sessions = createClient(Proto.SessionsService, transport())
    const { session } = await sessions.resolveSession({ target: { sessionKey: "stalled" } })
    const sessionId = session!.id
    const h2 = connect(served.url)
    try {
      const stream = h2.request({
        ":method": "POST",
        ":path": "/palyra.v1.GatewayService/RunStream",
        "content-type": "application/grpc",
        te: "trailers",
        authorization: `Bearer ${TOKEN}`
      })
      stream.write(
        envelopeOf(
          create(Proto.RunStreamRequestSchema, { action: { case: "resume", value: { sessionId, afterSeq: 0n } } })
        )
      )
      // Trailers arrive whether or not the body is read.
      const trailers = new Promise<Record<string, unknown>>((resolve) => stream.on("trailers", resolve))
      const ended = new Promise<void>((resolve) => stream.on("end", resolve))
      const first: Array<Buffer> = []
      await new Promise<void>((resolve) => stream.once("data", (c: Buffer) => resolve(void first.push(c))))
      // Stop reading: the HTTP/2 window and the socket fill, then the server's writes report backpressure.
      stream.pause()
      const g = createClient(Proto.GatewayService, transport())
      const flood = await g.routeMessage({ target: { sessionId }, text: "long 12000" })
      // Another session streams to the end while the stalled one is not read.
      const client = new palyra.GatewayService(address(), grpc.credentials.createInsecure())
      const other: Array<GrpcJsEvent> = []
      await new Promise<void>((resolve, reject) => {
        const call = client.runStream(metadata())
        call.on("data", (r: { event?: GrpcJsEvent }) => r.event && other.push(r.event))
        call.on("error", reject)
        call.on("end", () => resolve())
        call.write({ start: { target: { sessionKey: "not-stalled" }, text: "long 500" } })
        call.end()
      })
      client.close()
      expect(other.map((e) => e.tapeSeq)).toEqual(other.map((_, i) => i + 1))
      expect(other.at(-1)).toMatchObject({ runStateChanged: { to: "RUN_STATE_DONE" } })
      // The flood ends on the tape (the writer never waited for the stalled client).
      const run = createClient(Proto.GatewayService, transport())
      for (let i = 0; i < 200; i++) {
        const r = await run.getRun({ runId: flood.runId })
        if (r.run?.state === Proto.RunState.DONE) break
        await new Promise((r) => setTimeout(r, 50))
      }
      expect((await run.getRun({ runId: flood.runId })).run?.state).toBe(Proto.RunState.DONE)
      // Reading again: what was buffered, gap-free, then the resumable error in the trailers.
      const chunks: Array<Buffer> = [...first]
      stream.on("data", (c: Buffer) => chunks.push(c))
      stream.resume()
      const t = await trailers
      await ended
      expect(t["grpc-status"]).toBe(String(grpc.status.UNAVAILABLE))
      const seqs = splitEnvelopes(Buffer.concat(chunks)).flatMap((b) => {
        const r = fromBinary(Proto.RunStreamResponseSchema, b.subarray(5))
        return r.payload.case === "event" ? [Number(r.payload.value.tapeSeq)] : []
      })
      expect(seqs.length).toBeGreaterThan(0)
      expect(seqs).toEqual(seqs.map((_, i) => i + 1))
      expect(seqs.length).toBeLessThan(12000)
    } finally {
      h2.close()
    }
  }, 60_000)

  it("RunStream over the Connect protocol (HTTP/2) still takes connect-es's route: the same events, gap-free", async () => {
    const g = createClient(
      Proto.GatewayService,
      createConnectTransport({ baseUrl: served.url, httpVersion: "2", interceptors: [bearer()] })
    )
    async function* requests() {
      yield create(Proto.RunStreamRequestSchema, {
        action: { case: "start", value: { target: { sessionKey: "connect-protocol" }, text: "long 200" } }
      })
    }
    const seqs: Array<number> = []
    let last: Proto.RunStreamResponse | undefined
    for await (const r of g.runStream(requests())) {
      if (r.payload.case === "event") seqs.push(Number(r.payload.value.tapeSeq))
      last = r
    }
    expect(seqs.length).toBeGreaterThan(200)
    expect(seqs).toEqual(seqs.map((_, i) => i + 1))
    expect(last?.payload.case === "event" && last.payload.value.kind.case).toBe("runStateChanged")
  })
})

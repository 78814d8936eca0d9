/**
 * `RunStream` over the gRPC protocol (HTTP/2, `application/grpc[+proto]`) without connect-es's
 * per-message response pipeline.
 *
 * Connect serves a streaming response through a chain of async-iterable stages (serialize, envelope,
 * compress check, join, catch) and a `write` promise per message; for a stream of small tape events
 * that chain was the largest cost of delivery. Here the request side, the headers, the deadline and
 * the trailers are still connect-es's own functions (`createHandlerContext`, `parseTimeout`,
 * `compressionNegotiate`, the envelope splitter/parser, `setTrailerStatus`), and only the response
 * body is ours: every batch of ready events is encoded into one buffer of length-prefixed protobuf
 * envelopes (memoized per batch, shared by the streams of its session) and is one socket write.
 * Node's stream backpressure stops the taking while the client is not reading (the hub then cuts it
 * off with the resumable error, as before). gRPC-Web, Connect and JSON requests stay on connect-es.
 *
 * @since 0.1.0
 */

import type { Http2ServerRequest, Http2ServerResponse } from "node:http2"
import { create, toBinary } from "@bufbuild/protobuf"
import { Code, ConnectError, createContextValues, createHandlerContext, type HandlerContext } from "@connectrpc/connect"
import {
  compressionNegotiate,
  createMethodSerializationLookup,
  getAbortSignalReason,
  pipe,
  transformDecompressEnvelope,
  transformParseEnvelope,
  transformPrepend,
  transformSplitEnvelope
} from "@connectrpc/connect/protocol"
import { headerAcceptEncoding, headerEncoding, parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc"
import { compressionBrotli, compressionGzip, universalRequestFromNodeRequest } from "@connectrpc/connect-node"
import type { TapeEvent } from "@palyra/core"
import * as pb from "../gen/palyra/v1/gateway_pb.js"

/** What the RunStream logic yields: the bound session's id first, then batches of tape events. @since 0.1.0 @category Models */
export type Item = string | ReadonlyArray<TapeEvent.TapeEvent>

const method = pb.GatewayService.method.runStream
const path = `/${pb.GatewayService.typeName}/${method.name}`
const grpcContentType = /^application\/grpc(?:\+proto)?(?:;.*)?$/i

/** A request this path serves: `RunStream` with the gRPC protocol's binary codec. @since 0.1.0 @category Guards */
export const handles = (req: Http2ServerRequest): boolean =>
  req.url === path && req.method === "POST" && grpcContentType.test(req.headers["content-type"] ?? "")

/** A message as one gRPC envelope: flags byte 0 (uncompressed), 4-byte big-endian length, the bytes. */
const envelope = (message: pb.RunStreamResponse): Buffer => {
  const bytes = toBinary(pb.RunStreamResponseSchema, message)
  const out = Buffer.allocUnsafe(5 + bytes.length)
  out[0] = 0
  out.writeUInt32BE(bytes.length, 1)
  out.set(bytes, 5)
  return out
}

// ---- the streamed-text event, encoded by hand ----
// Most events of a stream are `AssistantDelta`s; building their `RunStreamResponse` (a `TapeEvent`,
// a `Timestamp`, an `AssistantDelta`) and encoding it by reflection was ~4 µs each. Written straight
// into one buffer here, byte for byte what `toBinary` writes (fields in declaration order, proto3
// defaults omitted, sub-messages always written): `test/runStreamWire.test.ts` compares the two over
// generated events. Values outside what this writes (a negative or fractional time or seq, a turn
// past uint32) take the generic path.

/** Bytes of a varint of a non-negative safe integer. */
const varintSize = (n: number) => {
  let size = 1
  while (n >= 0x80) {
    n = Math.floor(n / 0x80)
    size++
  }
  return size
}
const writeVarint = (out: Buffer, at: number, n: number) => {
  while (n >= 0x80) {
    out[at++] = (n % 0x80) | 0x80
    n = Math.floor(n / 0x80)
  }
  out[at++] = n
  return at
}
/** Size of an optional field (tag byte + body) when its body is `size` bytes; 0 when omitted. */
const lenField = (size: number) => (size === 0 ? 0 : 1 + varintSize(size) + size)
const intField = (n: number) => (n === 0 ? 0 : 1 + varintSize(n))
/** Write an optional VARINT field (omitted when 0); answers the next offset. */
const writeInt = (out: Buffer, at: number, tag: number, n: number) => {
  if (n === 0) return at
  out[at] = tag
  return writeVarint(out, at + 1, n)
}
/** Write an optional string field of `bytes` UTF-8 bytes (omitted when empty); answers the next offset. */
const writeText = (out: Buffer, at: number, tag: number, text: string, bytes: number) => {
  if (bytes === 0) return at
  out[at] = tag
  const p = writeVarint(out, at + 1, bytes)
  return p + out.write(text, p, "utf8")
}

// Tags: RunStreamResponse.event = 1 (LEN); TapeEvent.session_id = 1, run_id = 2 (LEN), tape_seq = 3
// (VARINT), at = 4 (LEN), assistant_delta = 13 (LEN); Timestamp.seconds = 1, nanos = 2 (VARINT);
// AssistantDelta.turn = 1 (VARINT), text = 2 (LEN).
//
// A batch is written in two passes into one buffer (no buffer per event and no `Buffer.concat`):
// `planDelta` sizes a delta (its text's UTF-8 length, its id prefix), `writeDelta` writes it. The
// session and run id fields are the same for every delta of a run: their encoded bytes are kept per
// session (`Prefixes`) and copied, instead of measuring and UTF-8-encoding both ids per event.

type Delta = Extract<TapeEvent.TapeEvent, { _tag: "AssistantDelta" }>

/** The encoded `session_id` and `run_id` fields of a session's current run. */
interface Prefix {
  readonly runId: string
  readonly bytes: Buffer
}

/** The id prefixes of the sessions seen last (bounded: cleared when it reaches `maxPrefixes`). */
type Prefixes = Map<string, Prefix>
const maxPrefixes = 4096

const prefixOf = (prefixes: Prefixes, sessionId: string, runId: string): Buffer => {
  const known = prefixes.get(sessionId)
  if (known !== undefined && known.runId === runId) return known.bytes
  const sessionBytes = Buffer.byteLength(sessionId)
  const runBytes = Buffer.byteLength(runId)
  const bytes = Buffer.allocUnsafeSlow(lenField(sessionBytes) + lenField(runBytes))
  const p = writeText(bytes, writeText(bytes, 0, 0x0a, sessionId, sessionBytes), 0x12, runId, runBytes)
  if (p !== bytes.length) throw new Error("RunStream id prefix: size mismatch")
  if (prefixes.size >= maxPrefixes) prefixes.clear()
  prefixes.set(sessionId, { runId, bytes })
  return bytes
}

/** UTF-8 length of `text`: short ASCII text is measured here (a native call costs more than the loop). */
const utf8Length = (text: string) => {
  const n = text.length
  if (n > 64) return Buffer.byteLength(text)
  for (let i = 0; i < n; i++) if (text.charCodeAt(i) >= 0x80) return Buffer.byteLength(text)
  return n
}

/** Whether the hand-written encoder takes this delta (else the generic path, which is always right). */
const fits = (e: Delta) =>
  Number.isSafeInteger(e.at) &&
  e.at >= 0 &&
  Number.isSafeInteger(e.tapeSeq) &&
  e.tapeSeq >= 0 &&
  Number.isInteger(e.turn) &&
  e.turn >= 0 &&
  e.turn <= 0xffffffff

/** A delta's `Timestamp` message body size (its `at`, in ms, as seconds and nanos). */
const timestampSize = (at: number) => {
  const seconds = Math.floor(at / 1000)
  return intField(seconds) + intField((at - seconds * 1000) * 1_000_000)
}
/** A delta's `AssistantDelta` message body size. */
const deltaBodySize = (e: Delta, textBytes: number) => intField(e.turn) + lenField(textBytes)
/** A delta's `TapeEvent` message body size, from its text's UTF-8 length and its id prefix's length. */
const eventSize = (e: Delta, textBytes: number, prefixBytes: number) => {
  const timestamp = timestampSize(e.at)
  const delta = deltaBodySize(e, textBytes)
  return prefixBytes + intField(e.tapeSeq) + 1 + varintSize(timestamp) + timestamp + 1 + varintSize(delta) + delta
}
/** A delta's whole envelope size (5-byte gRPC prefix included). */
const deltaEnvelopeSize = (e: Delta, textBytes: number, prefixBytes: number) => {
  const event = eventSize(e, textBytes, prefixBytes)
  return 5 + 1 + varintSize(event) + event
}

/** Writes a delta's envelope at `at` (sized by `deltaEnvelopeSize` with the same text length and prefix); answers the end. */
const writeDelta = (out: Buffer, at: number, e: Delta, textBytes: number, prefix: Buffer): number => {
  // Plain numbers, no sizes object: this runs once per delta (the sizes are a few integer ops).
  const seconds = Math.floor(e.at / 1000)
  const nanos = (e.at - seconds * 1000) * 1_000_000
  const timestamp = intField(seconds) + intField(nanos)
  const delta = deltaBodySize(e, textBytes)
  const event = eventSize(e, textBytes, prefix.length)
  out[at] = 0
  out.writeUInt32BE(1 + varintSize(event) + event, at + 1)
  out[at + 5] = 0x0a
  let p = writeVarint(out, at + 6, event)
  // `TypedArray#set`: `Buffer#copy` validates its arguments in JS first, more than a short id costs.
  out.set(prefix, p)
  p += prefix.length
  p = writeInt(out, p, 0x18, e.tapeSeq)
  out[p++] = 0x22
  p = writeVarint(out, p, timestamp)
  p = writeInt(out, p, 0x08, seconds)
  p = writeInt(out, p, 0x10, nanos)
  out[p++] = 0x6a
  p = writeVarint(out, p, delta)
  p = writeInt(out, p, 0x08, e.turn)
  if (textBytes === 0) return p
  out[p] = 0x12
  p = writeVarint(out, p + 1, textBytes)
  if (textBytes === e.text.length && textBytes <= 64) {
    // ASCII (the length says so): byte by byte, cheaper than a native call for short text.
    for (let i = 0; i < textBytes; i++) out[p + i] = e.text.charCodeAt(i)
    return p + textBytes
  }
  return p + out.write(e.text, p, "utf8")
}

/**
 * Encodes a batch of events into one buffer of length-prefixed `RunStreamResponse` envelopes (a
 * batch encoded last is memoized: a live event is the same object for every subscriber of its
 * session, so another stream taking the same events gets the same buffer). `response` must map an event to its `RunStreamResponse` (`event` = `toPbEvent`): an
 * `AssistantDelta` is written directly, byte for byte what `response` then `toBinary` would give.
 *
 * @since 0.1.0
 * @category Encoding
 */
export const batchEncoder = (
  response: (e: TapeEvent.TapeEvent) => pb.RunStreamResponse
): ((events: ReadonlyArray<TapeEvent.TapeEvent>) => Buffer) => {
  // The batches encoded last (a ring, newest first): another stream of the session usually takes
  // the same events in the same publication, and then gets the same buffer. Per batch, not per event:
  // with one stream per session every lookup misses, and a scan per event cost more than it saved
  // (a `Map` by event too: `bench/stream/encode.ts`).
  const memo = 32
  const firsts = new Array<TapeEvent.TapeEvent | undefined>(memo)
  const lengths = new Array<number>(memo).fill(0)
  // The whole list when a batch has more than one event (a copy: the caller's array may be reused).
  const lists = new Array<ReadonlyArray<TapeEvent.TapeEvent> | undefined>(memo)
  const values = new Array<Buffer | undefined>(memo)
  let next = 0
  const sameRest = (a: ReadonlyArray<TapeEvent.TapeEvent>, b: ReadonlyArray<TapeEvent.TapeEvent>) => {
    for (let i = 1; i < b.length; i++) if (a[i] !== b[i]) return false
    return true
  }
  const cached = (events: ReadonlyArray<TapeEvent.TapeEvent>): Buffer | undefined => {
    const first = events[0]
    const n = events.length
    for (let k = 0, i = next; k < memo; k++) {
      i = i === 0 ? memo - 1 : i - 1
      if (firsts[i] === first && lengths[i] === n && (n === 1 || sameRest(lists[i]!, events))) return values[i]
    }
    return undefined
  }
  const remember = (events: ReadonlyArray<TapeEvent.TapeEvent>, bytes: Buffer) => {
    if (bytes.byteLength > 64 * 1024) return
    firsts[next] = events[0]
    lengths[next] = events.length
    lists[next] = events.length === 1 ? undefined : events.slice()
    values[next] = bytes
    next = next + 1 === memo ? 0 : next + 1
  }
  const prefixes: Prefixes = new Map()
  // Per batch, per event (reused): the bytes already at hand, or a delta's text length and prefix.
  const ready: Array<Buffer | undefined> = []
  const textLengths: Array<number> = []
  const idPrefixes: Array<Buffer | undefined> = []
  return (events) => {
    const n = events.length
    const hit = cached(events)
    if (hit !== undefined) return hit
    let total = 0
    for (let i = 0; i < n; i++) {
      const event = events[i]!
      if (event._tag === "AssistantDelta" && fits(event)) {
        const prefix = prefixOf(prefixes, event.sessionId, event.runId ?? "")
        const textBytes = utf8Length(event.text)
        ready[i] = undefined
        textLengths[i] = textBytes
        idPrefixes[i] = prefix
        total += deltaEnvelopeSize(event, textBytes, prefix.length)
      } else {
        const bytes = envelope(response(event))
        ready[i] = bytes
        total += bytes.byteLength
      }
    }
    let out: Buffer
    if (n === 1 && ready[0] !== undefined) {
      out = ready[0]
      ready[0] = undefined
    } else {
      out = Buffer.allocUnsafe(total)
      let p = 0
      for (let i = 0; i < n; i++) {
        const bytes = ready[i]
        if (bytes !== undefined) {
          p += bytes.copy(out, p)
          ready[i] = undefined
        } else {
          p = writeDelta(out, p, events[i] as Delta, textLengths[i]!, idPrefixes[i]!)
          idPrefixes[i] = undefined
        }
      }
      // A mismatch would be a bug here: never send it.
      if (p !== total) throw new Error("RunStream envelope: size mismatch")
    }
    remember(events, out)
    return out
  }
}

/**
 * Events' `RunStreamResponse` envelopes one at a time (see {@link batchEncoder}, which this wraps).
 *
 * @since 0.1.0
 * @category Encoding
 */
export const eventEnvelopes = (
  response: (e: TapeEvent.TapeEvent) => pb.RunStreamResponse
): ((event: TapeEvent.TapeEvent) => Buffer) => {
  const encode = batchEncoder(response)
  return (event) => encode([event])
}

/**
 * Writes a batch of events to the call's HTTP/2 stream now, if the stream takes it without a backlog
 * (returns `false`, having written nothing, otherwise: the caller yields the batch instead, and the
 * handler waits for `drain` before writing it). Called from the follower's wake-up. A session id
 * (the stream's first message, written from the start commit's publication) is written likewise.
 *
 * @since 0.1.0
 * @category Models
 */
export type DirectWrite = (item: Item) => boolean

/** The options of {@link makeHandler}. @since 0.1.0 @category Models */
export interface HandlerOptions {
  readonly readMaxBytes: number
  readonly shutdownSignal: AbortSignal
  /** Authenticates the request's `authorization` header into the context values, or refuses it. */
  readonly authenticate: (authorization: string | null, ctx: HandlerContext) => ConnectError | undefined
  /** The RunStream logic, shared with the connect-es route; `direct` may write live events itself. */
  readonly items: (
    requests: AsyncIterable<pb.RunStreamRequest>,
    ctx: HandlerContext,
    direct: DirectWrite
  ) => AsyncGenerator<Item>
  /** A tape event as its response message (memoized by the caller). */
  readonly response: (event: TapeEvent.TapeEvent) => pb.RunStreamResponse
}

/**
 * A Node `http2` request handler for gRPC `RunStream` requests (see {@link handles}).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeHandler = (options: HandlerOptions) => {
  const serialization = createMethodSerializationLookup(method, undefined, undefined, {
    readMaxBytes: options.readMaxBytes,
    writeMaxBytes: 0xffffffff
  })
  const acceptCompression = [compressionGzip, compressionBrotli]
  const encode = batchEncoder(options.response)
  return (req: Http2ServerRequest, res: Http2ServerResponse): void => {
    const contextValues = createContextValues()
    const universal = universalRequestFromNodeRequest(req, res, undefined, contextValues)
    const timeout = parseTimeout(universal.header.get("grpc-timeout"), Number.MAX_SAFE_INTEGER)
    const ctx = createHandlerContext({
      service: pb.GatewayService,
      method,
      protocolName: "grpc",
      requestMethod: "POST",
      url: universal.url,
      ...(timeout.timeoutMs === undefined ? {} : { timeoutMs: timeout.timeoutMs }),
      shutdownSignal: options.shutdownSignal,
      requestSignal: universal.signal,
      requestHeader: universal.header,
      contextValues
    })
    const compression = compressionNegotiate(
      acceptCompression,
      universal.header.get(headerEncoding),
      universal.header.get(headerAcceptEncoding),
      headerAcceptEncoding
    )
    const requests = pipe(
      universal.body as AsyncIterable<Uint8Array>,
      transformPrepend<Uint8Array>(() => {
        if (compression.error) throw compression.error
        if (timeout.error) throw timeout.error
        return undefined
      }),
      transformSplitEnvelope(options.readMaxBytes),
      transformDecompressEnvelope(compression.request, options.readMaxBytes),
      transformParseEnvelope(serialization.getI(true))
    )
    res.writeHead(200, { "content-type": "application/grpc+proto" })
    void respond(options, encode, ctx, requests, res, universal.header.get("authorization"))
  }
}

const sessionIdEnvelope = (sessionId: string) =>
  envelope(create(pb.RunStreamResponseSchema, { payload: { case: "sessionId", value: sessionId } }))

/** Run the RunStream logic and write what it yields; the status goes in the trailers. */
const respond = async (
  options: HandlerOptions,
  frames: (events: ReadonlyArray<TapeEvent.TapeEvent>) => Buffer,
  ctx: ReturnType<typeof createHandlerContext>,
  requests: AsyncIterable<pb.RunStreamRequest>,
  res: Http2ServerResponse,
  authorization: string | null
) => {
  let error: ConnectError | undefined
  let drained: (() => void) | undefined
  const onDrain = () => {
    const d = drained
    drained = undefined
    d?.()
  }
  // One listener each for the whole call (a stream that fills its window often adds none).
  res.on("drain", onDrain)
  ctx.signal.addEventListener("abort", onDrain, { once: true })
  const whenWritable = () =>
    new Promise<void>((resolve) => {
      if (ctx.signal.aborted) resolve()
      else drained = resolve
    })
  const stream = res.stream
  // Straight to the HTTP/2 stream (what `res.write` calls once the headers are out, which they are:
  // the session's id is written first), only while it has no backlog.
  // The direct writes of one turn of the event loop are joined into one write, made from a microtask
  // (before the turn ends, which is when the HTTP/2 session sends anyway: `bench/stream/h2flush.ts`):
  // a journal answer can publish several commits in one turn, and one write per commit per stream
  // made more, smaller DATA frames for the client to parse. Anything written by the loop below, and
  // the trailers, go after what is queued here.
  // (`Http2ServerResponse` has no `destroyed`: the stream's is the one that tells.)
  // What is queued counts against the stream's buffer: the turn's publications may come before the
  // flush (an append answered synchronously, e.g. a memory journal, or many events per publication),
  // so `writableNeedDrain` alone would not see a stalled client's backlog growing here.
  let queued: Array<Buffer> | undefined
  let queuedBytes = 0
  const flush = () => {
    const q = queued
    queued = undefined
    queuedBytes = 0
    if (q === undefined || stream.destroyed) return
    stream.write(q.length === 1 ? q[0]! : Buffer.concat(q))
  }
  const direct: DirectWrite = (events) => {
    if (
      stream.destroyed ||
      stream.writableNeedDrain ||
      ctx.signal.aborted ||
      queuedBytes + stream.writableLength >= stream.writableHighWaterMark
    )
      return false
    if (typeof events === "string") {
      // The first message, through the response (it is what sends the headers if they are not out).
      flush()
      res.write(sessionIdEnvelope(events))
      return true
    }
    if (queued === undefined) {
      queued = []
      queueMicrotask(flush)
    }
    const bytes = frames(events)
    queued.push(bytes)
    queuedBytes += bytes.byteLength
    return true
  }
  try {
    const refused = options.authenticate(authorization, ctx)
    if (refused) throw refused
    for await (const item of options.items(requests, ctx, direct)) {
      if (stream.destroyed) break
      flush()
      // A direct write may have left a backlog: take nothing more until it drained.
      if (typeof item !== "string" && stream.writableNeedDrain) {
        await whenWritable()
        if (stream.destroyed) break
      }
      let ok: boolean
      if (typeof item === "string") {
        ok = res.write(sessionIdEnvelope(item))
      } else {
        ok = res.write(frames(item))
      }
      // Backpressure: take nothing more until the socket drained (or the call ended).
      if (!ok && !stream.destroyed) await whenWritable()
    }
    if (ctx.signal.aborted) error = ConnectError.from(getAbortSignalReason(ctx.signal), Code.Canceled)
  } catch (e) {
    error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e)
  } finally {
    res.off("drain", onDrain)
    ctx.signal.removeEventListener("abort", onDrain)
    ctx.abort()
  }
  flush()
  if (stream.destroyed) return
  const trailers = new Headers({ "grpc-status": "0" })
  setTrailerStatus(trailers, error)
  res.addTrailers(Object.fromEntries(trailers))
  res.end()
}

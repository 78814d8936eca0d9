/**
 * `RunStream` over the gRPC protocol (HTTP/2, `application/grpc[+proto]`) without connect-es's
 * per-message response pipeline.
 *
 * Connect serves a streaming response through a chain of async-iterable stages (serialize, envelope,
 * compress check, join, catch) and a `write` promise per message; for a stream of small tape events
 * that chain was the largest cost of delivery. Here the request side, the headers, the deadline and
 * the trailers are still connect-es's own functions (`createHandlerContext`, `parseTimeout`,
 * `compressionNegotiate`, the envelope splitter/parser, `setTrailerStatus`), and only the response
 * body is ours: each event's length-prefixed protobuf envelope is encoded once (a memo per event
 * object, shared by every stream of its session) and every batch of ready events is one socket write.
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
import { Follower, type TapeEvent } from "@palyra/core"
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
const deltaEnvelope = (e: Extract<TapeEvent.TapeEvent, { _tag: "AssistantDelta" }>): Buffer | undefined => {
  const { at, tapeSeq, turn, text, sessionId } = e
  if (!(Number.isSafeInteger(at) && at >= 0 && Number.isSafeInteger(tapeSeq) && tapeSeq >= 0)) return undefined
  if (!(Number.isInteger(turn) && turn >= 0 && turn <= 0xffffffff)) return undefined
  const runId = e.runId ?? ""
  const seconds = Math.floor(at / 1000)
  const nanos = (at - seconds * 1000) * 1_000_000
  const sessionBytes = Buffer.byteLength(sessionId)
  const runBytes = Buffer.byteLength(runId)
  const textBytes = Buffer.byteLength(text)
  const timestamp = intField(seconds) + intField(nanos)
  const delta = intField(turn) + lenField(textBytes)
  const event =
    lenField(sessionBytes) +
    lenField(runBytes) +
    intField(tapeSeq) +
    1 +
    varintSize(timestamp) +
    timestamp +
    1 +
    varintSize(delta) +
    delta
  const message = 1 + varintSize(event) + event
  const out = Buffer.allocUnsafe(5 + message)
  out[0] = 0
  out.writeUInt32BE(message, 1)
  out[5] = 0x0a
  let p = writeVarint(out, 6, event)
  p = writeText(out, p, 0x0a, sessionId, sessionBytes)
  p = writeText(out, p, 0x12, runId, runBytes)
  p = writeInt(out, p, 0x18, tapeSeq)
  out[p++] = 0x22
  p = writeVarint(out, p, timestamp)
  p = writeInt(out, p, 0x08, seconds)
  p = writeInt(out, p, 0x10, nanos)
  out[p++] = 0x6a
  p = writeVarint(out, p, delta)
  p = writeInt(out, p, 0x08, turn)
  p = writeText(out, p, 0x12, text, textBytes)
  // A mismatch would be a bug here: never send it (the generic path is always right).
  return p === out.length ? out : undefined
}

/**
 * Events' `RunStreamResponse` envelopes, each encoded once and shared by every stream (memoized for
 * the events encoded last, see `Follower.encodedOnce`: a live event is the same object for every
 * subscriber of its session). `response` must map an event to its `RunStreamResponse` (`event` =
 * `toPbEvent`): an `AssistantDelta` is written directly, byte for byte what `response` then
 * `toBinary` would give.
 *
 * @since 0.1.0
 * @category Encoding
 */
export const eventEnvelopes = (
  response: (e: TapeEvent.TapeEvent) => pb.RunStreamResponse
): ((event: TapeEvent.TapeEvent) => Buffer) =>
  Follower.encodedOnce(
    (event): Buffer =>
      (event._tag === "AssistantDelta" ? deltaEnvelope(event) : undefined) ?? envelope(response(event)),
    64,
    (bytes) => bytes.byteLength <= 64 * 1024
  )

/**
 * Writes a batch of events to the call's HTTP/2 stream now, if the stream takes it without a backlog
 * (returns `false`, having written nothing, otherwise: the caller yields the batch instead, and the
 * handler waits for `drain` before writing it). Called from the follower's wake-up.
 *
 * @since 0.1.0
 * @category Models
 */
export type DirectWrite = (events: ReadonlyArray<TapeEvent.TapeEvent>) => boolean

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
  const eventEnvelope = eventEnvelopes(options.response)
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
    void respond(options, eventEnvelope, ctx, requests, res, universal.header.get("authorization"))
  }
}

/** Run the RunStream logic and write what it yields; the status goes in the trailers. */
const respond = async (
  options: HandlerOptions,
  eventEnvelope: (event: TapeEvent.TapeEvent) => Buffer,
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
  const frames = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
    events.length === 1 ? eventEnvelope(events[0]!) : Buffer.concat(events.map(eventEnvelope))
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
        ok = res.write(envelope(create(pb.RunStreamResponseSchema, { payload: { case: "sessionId", value: item } })))
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

/**
 * A model answer's Node body as the web `ReadableStream` a provider reads, with the chunks that arrive
 * together enqueued as one (a burst is enqueued as soon as it reaches the body's high-water mark).
 *
 * `Readable.toWeb` enqueues every `data` event on its own. undici emits one per HTTP chunk, so a
 * streamed answer whose SSE events come in one socket read (the usual case for a short answer, and
 * for any answer whose events queue up while this thread is busy) is many chunks, and each travels
 * alone through the provider's byte, text and SSE-parser stages (`pipeThrough` × 3: a read promise,
 * a decode and a parse each) before its events are parsed. Here the chunks of one synchronous burst
 * (undici parses a socket read in one go) are joined in a microtask and enqueued once: the same bytes
 * in the same order, fewer stage passes (measured: ~17 KB allocated per plain daemon turn less,
 * PERF-NOTES round 16b). A chunk alone is copied as `toWeb` copies it (out of the socket's buffer).
 *
 * Otherwise it behaves as `Readable.toWeb` (Node 24's `newReadableStreamFromStreamReadable`): the
 * body starts paused and is resumed by `pull`, paused again when the queue is full (byte-length
 * strategy with the body's high-water mark); its end closes the stream after what is pending, its
 * failure errors it (a close before the end as an `AbortError`); cancelling destroys the body.
 *
 * @internal
 */
import { finished, type Readable } from "node:stream"

const abortError = (cause: unknown): Error =>
  Object.assign(new Error("The operation was aborted", { cause }), { name: "AbortError", code: "ABORT_ERR" })

/** The answer body `body` as a web stream, a socket read's chunks as one (see above). @internal */
export const webBody = (body: Readable): ReadableStream<Uint8Array> => {
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined
  let settled = false
  let pending: Array<Uint8Array> = []
  let pendingBytes = 0

  const flush = () => {
    if (settled || pending.length === 0) return
    let chunk: Uint8Array
    if (pending.length === 1) chunk = new Uint8Array(pending[0]!)
    else {
      chunk = new Uint8Array(pendingBytes)
      let at = 0
      for (const part of pending) {
        chunk.set(part, at)
        at += part.byteLength
      }
    }
    pending = []
    pendingBytes = 0
    controller!.enqueue(chunk)
    if ((controller!.desiredSize ?? 0) <= 0) body.pause()
  }

  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c
      },
      pull() {
        body.resume()
      },
      cancel(reason) {
        settled = true
        pending = []
        // As `toWeb` (its `destroyer`): a cancel without an `Error` destroys with an `AbortError`.
        body.destroy(reason instanceof Error ? reason : abortError(reason))
      }
    },
    new ByteLengthQueuingStrategy({ highWaterMark: body.readableHighWaterMark })
  )

  // `let`, as in `toWeb`: safe even were the callback ever called before `finished` returns.
  let cleanup: () => void = () => {}
  cleanup = finished(body, { writable: false }, (error) => {
    cleanup()
    // A legacy stream may emit `error` again after it finished (as `toWeb` guards against).
    body.on("error", () => {})
    if (settled) return
    // What arrived before the end or the failure is enqueued first (as `toWeb` had already enqueued
    // it): the end is announced on `nextTick`, before the microtask that would enqueue the last burst;
    // a failure then discards what no read took, as it does there.
    flush()
    if (error) {
      settled = true
      return controller!.error(
        (error as { code?: unknown }).code === "ERR_STREAM_PREMATURE_CLOSE" ? abortError(error) : error
      )
    }
    settled = true
    controller!.close()
  })

  if (!settled) {
    body.pause()
    body.on("data", (chunk: Uint8Array) => {
      if (settled) return
      if (pending.length === 0) queueMicrotask(flush)
      pending.push(chunk)
      pendingBytes += chunk.byteLength
      // A burst as large as the queue's bound is enqueued now (and the body paused if the queue is
      // full): a source pushing synchronously while flowing never lets the microtask run, and would
      // otherwise be read to its end into `pending`.
      if (pendingBytes >= body.readableHighWaterMark) flush()
    })
  }
  return stream
}

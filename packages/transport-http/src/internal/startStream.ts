/**
 * A streamed start's response begun inside the run's start commit's publication, shared by every
 * HTTP route that starts a run and streams it (`fastRuns.ts`, the HttpApi `/v1/runs?stream=true`
 * route, the OpenAI chat stream): `Gateway.startRunFollowing`'s `attached` hook arms a wake-up that,
 * on the first publication carrying this run's events (its start committed), writes the head and
 * the first frames — not when the call returns, behind every other start of a burst in the
 * scheduler. A refused start publishes nothing, so it is answered with its typed status and nothing
 * else; a start whose commit succeeded but whose call then failed has its follower closed by
 * `startRunFollowing`, and its body ends cleanly after what it sent.
 *
 * Plain callbacks by design: they run inside the hub's publication, where nothing may escape.
 */
import type { ServerResponse } from "node:http"
import type { Readable } from "node:stream"
import * as Headers from "@effect/platform/Headers"
import type { HttpServerRequest } from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Follower, type Gateway, type Records, type TapeEvent } from "@palyra/core"
import { Effect, Exit, type Scope, Stream } from "effect"
import type { HandlerOptions } from "./common.js"
import { tapeBody } from "./tapeBody.js"

/** The event-stream response head every streamed route sends. @internal */
export const SSE_HEADERS = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  "x-accel-buffering": "no",
  connection: "keep-alive"
} as const

/** A piped body: `end` ends it cleanly; `done` once it has ended or the client has gone. @internal */
export interface Piping {
  readonly end: () => void
  done: boolean
  onDone?: (() => void) | undefined
  /** Why the body or the response failed (a server-side fault, not the client leaving), if it did. */
  error?: unknown
}

/**
 * Pipe `body` to `res` (its head already written), the two ends tied by hand rather than with
 * `stream.pipeline`, which builds and aborts an `AbortController` per call (a `DOMException` with its
 * stack each time): a body that fails or a response that closes (sent, or the client gone) destroys
 * the other side. One socket write per event-loop turn: the socket is corked at a turn's first frame
 * and uncorked when the turn's I/O callbacks are done (`setImmediate`), so the frames of commits
 * delivered in one turn — and the chunked terminator of the body's end — leave as one `writev`. The
 * socket itself is corked, not the response: a response ended while corked drops what it holds.
 * Stream accounting is unchanged while corked (a full socket still stops the pull).
 *
 * @internal
 */
export const pipeBody = (res: ServerResponse, body: Readable, end: () => void): Piping => {
  const piping: Piping = { end, done: false }
  const finish = (error?: unknown) => {
    if (piping.done) return
    piping.done = true
    if (error !== undefined) piping.error = error
    if (!body.destroyed) body.destroy()
    if (!res.writableFinished && !res.destroyed) res.destroy()
    piping.onDone?.()
  }
  // (Listeners that stay: an `error` with no listener would throw.)
  body.on("error", finish)
  res.on("error", finish)
  res.once("close", () => finish())
  body.pipe(res)
  const socket = res.socket
  let corked = false
  const uncork = () => {
    corked = false
    socket?.uncork()
  }
  if (socket !== null)
    body.prependListener("data", () => {
      if (corked) return
      corked = true
      socket.cork()
      setImmediate(uncork)
    })
  return piping
}

/** Resolves once the piped body is done (ended, or the client gone); interrupted, it ends it cleanly. @internal */
export const piped = (piping: Piping): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (piping.done) return resume(Effect.void)
    piping.onDone = () => resume(Effect.void)
    return Effect.sync(piping.end)
  })

/** The bookkeeping of one streamed start. @internal */
export interface EarlyStart {
  /** `startRunFollowing`'s `attached` option. */
  readonly attached: (follower: Follower.Follower, run: Records.Run) => void
  /** The start call has answered: the early wake-up does nothing from then on. */
  readonly answer: () => void
}

/**
 * Arm the early start: on the follower's first wake-up with events of this run (a run follower's
 * `take` filters the session's other runs' events), `begin(follower, taken, run)` is called inside
 * the publication, once, unless the call has answered or the client has gone. An end or a failure
 * taken first stays in the follower (`take` answers it again) for the answered path; a defect of
 * the read stays in the follower likewise, for the body to fail with. `begun()` says whether it ran.
 *
 * @internal
 */
export const earlyStart = (
  res: ServerResponse,
  begun: () => boolean,
  begin: (follower: Follower.Follower, taken: ReadonlyArray<TapeEvent.TapeEvent>, run: Records.Run) => void
): EarlyStart => {
  let answered = false
  return {
    answer: () => {
      answered = true
    },
    attached: (follower, run) => {
      const early = () => {
        if (answered || begun() || res.destroyed) return
        let ready: ReturnType<Follower.Follower["take"]>
        try {
          ready = follower.take()
        } catch {
          return
        }
        if (ready === undefined) return follower.onReady(early)
        if (ready === Follower.Done || Follower.isFailed(ready)) return
        begin(follower, ready, run)
      }
      follower.onReady(early)
    }
  }
}

/** The Node response under a platform request, when it is served by Node (else the route's old path). @internal */
export const nodeResponse = (
  options: Pick<HandlerOptions, "rawStreams">,
  request: HttpServerRequest
): ServerResponse | undefined => {
  if (options.rawStreams !== true) return undefined
  try {
    const res = NodeHttpServerRequest.toServerResponse(request)
    return typeof res === "object" && res !== null && typeof res.writeHead === "function" ? res : undefined
  } catch {
    return undefined
  }
}

/** What a streamed HttpApi route supplies to `streamedStart`. @internal */
export interface StreamedStart<E> {
  /** The start call, given the `attached` hook. */
  readonly start: (
    attached: EarlyStart["attached"]
  ) => Effect.Effect<Gateway.StartedRun & { readonly follower: Follower.Follower }, E, Scope.Scope>
  /**
   * Write the head and start the body on `res`, from the events already `taken` (none when it
   * starts after the call answered); plain, also called inside the start commit's publication.
   */
  readonly begin: (follower: Follower.Follower, taken: ReadonlyArray<TapeEvent.TapeEvent>, run: Records.Run) => void
  /** Whether `begin` ran. */
  readonly begun: () => boolean
  /** Whether the body failed on the server's side (it closed the response itself: not a client abort). */
  readonly failed?: (() => boolean) | undefined
  /**
   * The rest of the response once the call has answered (it was begun then, or is begun now by the
   * caller): resolves when the response is done. `failed`: the call failed after its start commit
   * (the follower is closed): end the body cleanly after what it sent.
   */
  readonly rest: (failed: boolean) => Effect.Effect<void>
}

/**
 * A streamed HttpApi route's start written on the Node response directly, from the start commit's
 * publication: the platform's own response is then empty and written after `res` has ended (the
 * platform writes nothing to an ended response). A refused start fails with its typed error, with
 * nothing written. Runs in the request's scope (the follower's).
 *
 * @internal
 */
export const streamedStart = <E>(
  res: ServerResponse,
  route: StreamedStart<E>
): Effect.Effect<HttpServerResponse.HttpServerResponse, E, Scope.Scope> =>
  Effect.gen(function* () {
    // A client gone once the stream has begun: marked ended here, ahead of the platform's own `close`
    // listener, which would interrupt this fiber and report a server error for a response whose head
    // is sent; the route's body ends by itself (its pipe or frame writer sees the response closed),
    // and the platform is answered with a client abort (`written`). Gone before it began (still in
    // admission): the platform's client abort interrupts the start, as for any request.
    const gone = { value: false }
    res.prependListener("close", () => {
      if (res.writableEnded || !route.begun()) return
      // A body that failed on the server's side closed it itself: `rest` reports that failure.
      if (route.failed?.() !== true) gone.value = true
      res.end() // destroyed already: only marks it ended
    })
    const early = earlyStart(res, route.begun, route.begin)
    const outcome = yield* Effect.exit(route.start(early.attached))
    early.answer()
    if (Exit.isFailure(outcome)) {
      if (!route.begun()) return yield* Effect.failCause(outcome.cause)
      // Started from its start commit, then failed or interrupted (its follower closed): the body
      // ends cleanly after the committed events it sent; the client resumes from its last id.
      yield* Effect.logWarning("the run's start failed after its commit; its stream ends", outcome.cause)
      yield* route.rest(true)
      return written(res, gone.value)
    }
    if (!route.begun()) {
      // Gone between the answer and here: nothing to write (the request scope releases the follower).
      if (res.destroyed) return written(res, true)
      route.begin(outcome.value.follower, [], outcome.value.run)
    }
    yield* route.rest(false)
    return written(res, gone.value)
  })

/**
 * The platform's response for one `res` has written itself: the same status and headers (what its
 * tracer and logs report), answered to an ended response, so the platform writes nothing. A client
 * gone before the end (the response destroyed, not ended) is the platform's client abort, 499.
 */
const written = (res: ServerResponse, gone: boolean): HttpServerResponse.HttpServerResponse => {
  if (gone || !res.writableEnded) {
    res.end() // destroyed already: only marks it ended, so the platform leaves it alone
    return HttpServerResponse.empty({ status: 499 })
  }
  return HttpServerResponse.empty({
    status: res.statusCode,
    headers: Headers.fromInput(res.getHeaders() as Record<string, string>)
  })
}

/**
 * Write a stream of frames to `res` (its head already written) with the socket's backpressure (a
 * full socket waits for `drain`), then end it. A response gone (client away) stops the writer: the
 * frames left are not pulled (the route answers the platform with a client abort).
 *
 * @internal
 */
export const writeFrames = <E>(res: ServerResponse, frames: Stream.Stream<Uint8Array, E>): Effect.Effect<void, E> =>
  Stream.runForEach(
    // Ends at once when the response closes (the client gone), not at the next frame.
    Stream.interruptWhen(
      Stream.takeWhile(frames, () => !res.destroyed),
      Effect.async<void>((resume) => {
        const closed = () => resume(Effect.void)
        if (res.destroyed) return closed()
        res.once("close", closed)
        return Effect.sync(() => res.off("close", closed))
      })
    ),
    (bytes) => {
      if (res.write(bytes)) return Effect.void
      return Effect.async<void>((resume) => {
        const off = () => {
          res.off("drain", go)
          res.off("close", go)
        }
        // Either one resumes: both listeners go, so a long answer to a slow reader leaves none behind.
        const go = () => {
          off()
          resume(Effect.void)
        }
        res.on("drain", go)
        res.on("close", go)
        return Effect.sync(off)
      })
    }
  ).pipe(Effect.zipRight(Effect.sync(() => res.end())))

/**
 * The HttpApi `/v1/runs?stream=true` route's streamed start (`tapeBody` as in `fastRuns.ts`).
 *
 * @internal
 */
export const tapeStart = <E>(
  options: HandlerOptions,
  res: ServerResponse,
  start: StreamedStart<E>["start"]
): Effect.Effect<HttpServerResponse.HttpServerResponse, E, Scope.Scope> => {
  let piping: Piping | undefined
  return streamedStart(res, {
    start,
    begun: () => piping !== undefined,
    failed: () => piping?.error !== undefined,
    begin: (follower, taken) => {
      res.writeHead(200, SSE_HEADERS)
      const { body, end } = tapeBody(options, follower, false, taken)
      piping = pipeBody(res, body, end)
    },
    // Failed after its start commit: the follower is closed and would never wake the body, so it is
    // ended here (after what it holds) rather than at the next keep-alive.
    rest: (failed) =>
      Effect.suspend(() => {
        if (piping === undefined) return Effect.void
        if (failed) piping.end()
        const done = piping
        // A body that failed on the server's side is this request's failure (logged, a 500 in its
        // span), not the client leaving.
        return Effect.flatMap(piped(done), () =>
          done.error === undefined
            ? Effect.void
            : // (Logged once, as the request's failure, by the app's guard.)
              Effect.zipRight(
                Effect.sync(() => res.end()),
                Effect.die(done.error)
              )
        )
      })
  })
}

/**
 * `POST /v1/runs?stream=true` served straight from Node's request event, in front of the HttpApi
 * app: the hot route of every turn, without the per-request router, security middleware, URL
 * parameter decode and response machinery of `HttpApiBuilder` (about 7–9% of a daemon turn).
 *
 * It takes only what it answers exactly as the HttpApi route would, and leaves everything else to
 * the app untouched (nothing of the request is read before it decides):
 * - the method is `POST` and the target is exactly `/v1/runs?stream=true` (any other query, another
 *   spelling or a non-canonical path goes to the app and its guard);
 * - the body is JSON (multipart goes to the app) and its declared length is within the limit (the
 *   app's guard answers a declared oversize body);
 * - the bearer token authenticates, with the same authenticator the `Authentication` middleware
 *   calls first (a missing or invalid token, or a cookie-only request, goes to the app, which tries
 *   the cookie and answers 401/403 itself).
 *
 * What it then does is the route's handler: the body is read under the same size limit and decoded
 * by the same steps and `MessagePayload` Schema (a malformed body is a typed `InvalidArgument`,
 * 400); `Gateway.startRunFollowing` with the caller decides ownership and everything else; failures are
 * `{ code, message }` with the status from core's error table; the events are the same SSE body
 * the app's route sends (`tapeBody`: a follower's frames, the lagged-client `error` event,
 * keep-alive comments), piped with socket backpressure (a full socket stops the pull, so a stalled
 * client is cut off by the tape's own bound), ended cleanly at shutdown, closed when the client goes away.
 *
 * Plain callbacks by design (the body is fed by a follower and piped by Node), one fiber per request.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import * as Headers from "@effect/platform/Headers"
import * as HttpTraceContext from "@effect/platform/HttpTraceContext"
import { Auth, type Caller, Errors, type Follower, Gateway, type TapeEvent } from "@palyra/core"
import { Cause, Effect, Exit, type Fiber, FiberId, Option, Runtime } from "effect"
import { MessagePayload, toApiError } from "../Api.js"
import { decodeJsonBytes, isJsonType, readNodeBody } from "./body.js"
import { type HandlerOptions, messageRequest } from "./common.js"
import { type EarlyStart, earlyStart, type Piping, pipeBody, SSE_HEADERS } from "./startStream.js"
import { tapeBody } from "./tapeBody.js"

/** The one request target served here. */
const TARGET = "/v1/runs?stream=true"

const parentOf = (req: IncomingMessage) => {
  // Only these headers carry a client's trace (`HttpTraceContext.fromHeaders` reads no other, and
  // Node lower-cases names): without them there is no parent, and no copy of the headers to find so.
  const h = req.headers
  if (h.traceparent === undefined && h.b3 === undefined && h["x-b3-traceid"] === undefined) return {}
  const parent = HttpTraceContext.fromHeaders(Headers.fromInput(req.headers as Record<string, string>))
  return Option.isSome(parent) ? { parent: parent.value } : {}
}

/** Where the stream of a request stands, for the callbacks around it. */
interface Open {
  readonly res: ServerResponse
  /** The SSE body is being piped (from then on the body ends the response). */
  streaming?: boolean
  /** The piped body: `end` ends it cleanly; `done` once it has ended or the client has gone. */
  piping?: Piping
  /** The early start (`startStream.ts`): answered once the start call has (its wake-up does nothing then). */
  early?: EarlyStart
  fiber?: Fiber.RuntimeFiber<void, never>
}

/**
 * A Node request listener for the hot route: returns `false` (having touched nothing) when the
 * request is not one it answers exactly like the app, so the caller hands it on.
 *
 * @internal
 */
export const make = (
  options: HandlerOptions,
  tokens: ReadonlyArray<Auth.TokenGrant>
): Effect.Effect<(req: IncomingMessage, res: ServerResponse) => boolean, never, Gateway.Gateway> =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    const authenticate = Auth.makeAuthenticator(tokens)
    const open = new Set<Open>()
    let stopping = false

    // At shutdown, end every open stream cleanly (as the app's streams do).
    // Detached, not scoped: `serve` completes `shutdown` in a finalizer that runs after any this
    // scope would add (finalizers run in reverse), and the streams must still be open to end cleanly.
    runFork(
      Effect.zipRight(
        options.shutdown,
        Effect.sync(() => {
          stopping = true
          for (const o of open) o.fiber?.unsafeInterruptAsFork(FiberId.none)
        })
      )
    )

    const refuse = (res: ServerResponse, error: unknown) => {
      const body = toApiError(error)
      const headers: Record<string, string> = { "content-type": "application/json" }
      // An oversize body is left unread, so this connection cannot carry another request.
      if (error instanceof Errors.PayloadTooLarge) headers.connection = "close"
      res.writeHead(Errors.wire[body.code].http, headers)
      res.end(JSON.stringify(body))
    }

    /**
     * Write the run's events as SSE frames until it ends (the same body the app's route sends:
     * `tapeBody`, fed by a follower, piped with the socket's backpressure); resolves when the body
     * has ended or the client has gone. Interrupted (server shutdown), the body ends cleanly.
     */
    const pump = (o: Open, follower: Follower.Follower | undefined) =>
      Effect.async<void>((resume) => {
        const piping = o.piping ?? begin(o, follower!)
        // A body that failed on the server's side (a journal read mid-stream) fails the request: logged
        // below as "request failed", not taken for the client leaving.
        const ended = () => resume(piping.error === undefined ? Effect.void : Effect.die(piping.error))
        if (piping.done) return ended()
        piping.onDone = ended
        return Effect.sync(piping.end)
      })

    /** Send the head and pipe the SSE body (plain: also called inside the start commit's publication). */
    const begin = (o: Open, follower: Follower.Follower, taken?: ReadonlyArray<TapeEvent.TapeEvent>) => {
      o.res.writeHead(200, SSE_HEADERS)
      o.streaming = true
      // The route ends its own streams at shutdown (it interrupts this fiber: `end` below).
      const { body, end } = tapeBody(options, follower, true, taken)
      // Piped with the socket's backpressure, one socket write per event-loop turn (`pipeBody`).
      const piping = pipeBody(o.res, body, end)
      o.piping = piping
      return piping
    }

    const handle = (o: Open, req: IncomingMessage, caller: Caller.Caller) =>
      Effect.gen(function* () {
        const outcome = yield* Effect.exit(
          Effect.gen(function* () {
            const bytes = yield* readNodeBody(req, options.limits.maxBytes)
            const body = yield* decodeJsonBytes(MessagePayload, bytes, options.limits)
            // The run's follower is attached before its first commit: its first events are
            // delivered by their publication, not read back from the journal. The stream starts
            // inside the first of them (the start commit's, a run follower sees only its run's:
            // a refused start publishes nothing, and is answered below with nothing sent), not
            // when this call returns, behind every other start of a burst in the scheduler.
            const early = earlyStart(
              o.res,
              () => o.piping !== undefined,
              (follower, taken) => void begin(o, follower, taken)
            )
            o.early = early
            return yield* gateway.startRunFollowing(caller, messageRequest(body), { attached: early.attached })
          })
        )
        o.early?.answer()
        // Started from its start commit, then failed or interrupted (its follower closed: the body
        // ends cleanly after the committed events it sent; the client resumes from its last id).
        if (Exit.isFailure(outcome) && o.piping !== undefined) {
          yield* Effect.logWarning("the run's start failed after its commit; its stream ends", outcome.cause)
          // Its follower is closed and would never wake the body: end it (after what it holds) now.
          o.piping.end()
          return yield* pump(o, undefined)
        }
        if (Exit.isFailure(outcome)) {
          // A typed failure is answered like `answer` does; a defect goes on to the 500 below.
          const failure = Cause.failureOption(outcome.cause)
          if (Option.isNone(failure)) return yield* Effect.failCause(outcome.cause)
          if (!Errors.wire[toApiError(failure.value).code].expose)
            yield* Effect.logError("request failed", failure.value)
          return refuse(o.res, failure.value)
        }
        yield* pump(o, outcome.value.follower)
      }).pipe(
        // The follower is open until the response is done (or the request's fiber interrupted).
        Effect.scoped,
        Effect.catchAllCause((cause) =>
          Effect.logError("request failed", cause).pipe(
            Effect.zipRight(
              Effect.sync(() => {
                if (!o.res.headersSent) refuse(o.res, cause)
                else o.res.destroy()
              })
            )
          )
        ),
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            // A streaming response is ended by its body. The pump's interruption ends it; a body begun
            // inside the start commit's publication, interrupted before the pump ran (a shutdown
            // during the start), is ended here: its follower is closed and would never wake it.
            if (o.streaming) return o.piping?.end()
            if (o.res.headersSent) {
              if (!o.res.writableEnded && !o.res.destroyed) o.res.end()
            } else if (!o.res.destroyed) o.res.destroy()
          })
        ),
        // The server span the app's tracer middleware opens, in the client's trace (`traceparent`/b3).
        Effect.withSpan("http.server POST", {
          kind: "server",
          captureStackTrace: false,
          attributes: { "http.request.method": "POST", "url.path": "/v1/runs", "url.query": "stream=true" },
          ...parentOf(req)
        })
      )

    return (req, res) => {
      if (req.method !== "POST" || req.url !== TARGET || stopping) return false
      if (!isJsonType(req.headers["content-type"])) return false
      if (Number(req.headers["content-length"] ?? 0) > options.limits.maxBytes) return false
      const result = authenticate(req.headers.authorization)
      if (!("caller" in result)) return false
      const o: Open = { res }
      open.add(o)
      const fiber = runFork(handle(o, req, result.caller))
      o.fiber = fiber
      fiber.addObserver(() => open.delete(o))
      res.on("close", () => {
        if (!res.writableEnded) fiber.unsafeInterruptAsFork(FiberId.none)
      })
      return true
    }
  })

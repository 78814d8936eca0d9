/**
 * What every handler shares: options, the error mapping and server-sent event responses.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Errors, Metrics, type TapeEvent } from "@palyra/core"
import { Cause, Chunk, Effect, Exit, Option, Schedule, Stream } from "effect"
import { type ApiError, toApiError } from "../Api.js"
import * as Sse from "../Sse.js"
import type { Limits } from "./body.js"

/** @internal */
export interface HandlerOptions {
  readonly limits: Limits
  readonly heartbeatSeconds: number
  readonly ready: Effect.Effect<boolean>
  /** Completes when the server shuts down: open streams end cleanly then. */
  readonly shutdown: Effect.Effect<void>
  readonly chatTimeoutSeconds: number
}

/** Any failure as an error body; failures whose text is not for clients are logged here. @internal */
export const answer = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, ApiError, R> =>
  Effect.catchAll(effect, (error) => {
    const body = toApiError(error)
    const logged = Errors.wire[body.code].expose ? Effect.void : Effect.logError("request failed", error)
    return Effect.zipRight(logged, Effect.fail(body))
  })

/** SSE comments every `heartbeatSeconds`, so proxies do not close an idle stream. @internal */
export const keepAlive = (options: HandlerOptions) =>
  Stream.fromSchedule(Schedule.spaced(`${options.heartbeatSeconds} seconds`)).pipe(
    Stream.map(() => Sse.comment("keep-alive"))
  )

/** A tape as server-sent events, with keep-alives, counted as an open stream until it ends. @internal */
export const eventStream = (options: HandlerOptions, events: Stream.Stream<TapeEvent.TapeEvent, unknown>) => {
  const frames = Stream.concat(
    Stream.make(Sse.comment("connected")),
    Stream.mapChunks(events, tapeFrames).pipe(Stream.catchSome(lagged))
  )
  return sseResponse(withKeepAlive(options, frames))
}

/**
 * `frames` with a keep-alive comment whenever nothing was sent for `heartbeatSeconds`, ending
 * cleanly at shutdown — in one stage: one fiber pulls `frames` a chunk at a time (the next only once
 * this one was taken), and the response's pull waits on it with a plain timer for the heartbeat.
 * (`Stream.merge` + `interruptWhen` cost ~3 ms of CPU per streamed turn in queues and fibers.)
 */
const withKeepAlive = (options: HandlerOptions, frames: Stream.Stream<Uint8Array, unknown>) =>
  Stream.unwrapScoped(
    Effect.gen(function* () {
      let ready: Chunk.Chunk<Uint8Array> | undefined
      let taken: (() => void) | undefined
      let ended: Exit.Exit<void, unknown> | undefined
      let stopped = false
      let wake: (() => void) | undefined
      const poke = () => wake?.()
      yield* frames.pipe(
        Stream.runForEachChunk((chunk) =>
          Effect.async<void>((resume) => {
            ready = chunk
            taken = () => resume(Effect.void)
            poke()
          })
        ),
        Effect.exit,
        Effect.flatMap((exit) =>
          Effect.sync(() => {
            ended = exit
            poke()
          })
        ),
        Effect.forkScoped
      )
      yield* Effect.forkScoped(
        Effect.zipRight(
          options.shutdown,
          Effect.sync(() => {
            stopped = true
            poke()
          })
        )
      )
      const heartbeat = options.heartbeatSeconds * 1000
      const take = (): Effect.Effect<Chunk.Chunk<Uint8Array>, Option.Option<unknown>> | undefined => {
        if (stopped) return Effect.fail(Option.none())
        if (ready !== undefined) {
          const chunk = ready
          const next = taken
          ready = undefined
          taken = undefined
          next?.()
          return Effect.succeed(chunk)
        }
        if (ended === undefined) return undefined
        return Exit.isSuccess(ended)
          ? Effect.fail(Option.none())
          : Effect.failCause(Cause.map(ended.cause, Option.some))
      }
      const pull: Effect.Effect<Chunk.Chunk<Uint8Array>, Option.Option<unknown>> = Effect.suspend(
        () =>
          take() ??
          Effect.async((resume) => {
            const timer = setTimeout(() => {
              wake = undefined
              resume(Effect.succeed(Chunk.of(Sse.comment("keep-alive"))))
            }, heartbeat)
            wake = () => {
              clearTimeout(timer)
              wake = undefined
              resume(pull)
            }
            return Effect.sync(() => {
              clearTimeout(timer)
              wake = undefined
            })
          })
      )
      return Stream.repeatEffectChunkOption(pull)
    })
  )

const tapeFrame = (event: TapeEvent.TapeEvent): Uint8Array =>
  Sse.encodeOnce(event, () => ({ id: String(event.tapeSeq), event: event._tag, data: JSON.stringify(event) }))

/** The frames of the events that are ready, as one write (each event's frame is built once). @internal */
export const tapeFrames = (events: Chunk.Chunk<TapeEvent.TapeEvent>): Chunk.Chunk<Uint8Array> => {
  if (events.length === 1) return Chunk.of(tapeFrame(Chunk.unsafeHead(events)))
  const frames = Chunk.toReadonlyArray(Chunk.map(events, tapeFrame))
  return Chunk.of(Buffer.concat(frames))
}

/**
 * A client cut off for falling behind gets a last `error` event (code `unavailable`, the seq to resume
 * after) and the stream ends; it reconnects with `Last-Event-ID`/`afterSeq` = `lastSeq`.
 *
 * @internal
 */
export const lagged = (error: unknown) =>
  error instanceof Errors.StreamLagged
    ? Option.some(
        Stream.make(
          Sse.encode({
            event: "error",
            data: JSON.stringify({ ...toApiError(error), lastSeq: error.lastSeq })
          })
        )
      )
    : Option.none()

/** A server-sent event response, counted as an open stream until it ends. @internal */
export const sseResponse = (body: Stream.Stream<Uint8Array, unknown>) =>
  HttpServerResponse.stream(Metrics.trackOpenStream("http")(body), {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no", connection: "keep-alive" }
  })

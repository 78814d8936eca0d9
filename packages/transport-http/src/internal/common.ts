/**
 * What every handler shares: options, the error mapping and server-sent event responses.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Errors, Metrics, type TapeEvent } from "@palyra/core"
import { Chunk, Effect, Option, Schedule, Stream } from "effect"
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
  return sseResponse(
    Stream.merge(frames, keepAlive(options), { haltStrategy: "left" }).pipe(Stream.interruptWhen(options.shutdown))
  )
}

const tapeFrame = (event: TapeEvent.TapeEvent): Uint8Array =>
  Sse.encodeOnce(event, () => ({ id: String(event.tapeSeq), event: event._tag, data: JSON.stringify(event) }))

/** The frames of the events that are ready, as one write (each event's frame is built once). */
const tapeFrames = (events: Chunk.Chunk<TapeEvent.TapeEvent>): Chunk.Chunk<Uint8Array> => {
  if (events.length === 1) return Chunk.of(tapeFrame(Chunk.unsafeHead(events)))
  const frames = Chunk.toReadonlyArray(Chunk.map(events, tapeFrame))
  return Chunk.of(Buffer.concat(frames))
}

/**
 * A client cut off for falling behind gets a last `error` event (code `unavailable`, the seq to resume
 * after) and the stream ends; it reconnects with `Last-Event-ID`/`afterSeq` = `lastSeq`.
 */
const lagged = (error: unknown) =>
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

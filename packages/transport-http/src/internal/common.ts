/**
 * What every handler shares: options, the error mapping and server-sent event responses.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Errors, type Gateway, Metrics } from "@palyra/core"
import { Effect, Schedule, Stream } from "effect"
import { type ApiError, type MessagePayload, toApiError } from "../Api.js"
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
  /**
   * The app is served by `HttpTransport.serve` on its own Node server: a streamed start may write the
   * Node response itself, from the start commit's publication (`startStream.ts`). Off for an app an
   * embedder serves (`HttpTransport.httpApp`), whose own middleware (CORS headers, say) must shape
   * every response.
   */
  readonly rawStreams?: boolean | undefined
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

/** A server-sent event response, counted as an open stream until it ends. @internal */
export const sseResponse = (body: Stream.Stream<Uint8Array, unknown>) =>
  HttpServerResponse.stream(Metrics.trackOpenStream("http")(body), {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no", connection: "keep-alive" }
  })

/** A decoded `MessagePayload` as the Gateway's request (the HttpApi route and the fast route share it). */
export const messageRequest = (body: typeof MessagePayload.Type): Gateway.MessageRequest => ({
  text: body.text,
  sessionId: body.sessionId,
  key: body.sessionKey,
  channel: body.channel,
  agent: body.agent,
  attachments: body.attachments
})

/**
 * A session's tape as a server-sent event response whose body is a Node `Readable` fed by a core
 * `Follower`: the platform pipes it to the socket (`HttpServerResponse.raw`), so an event costs a
 * take, one shared frame (built once per event for every stream) and one push — no fiber, queue or
 * Effect `Stream` stage per event (those were most of the CPU a delivered event cost). Everything
 * ready is sent as one write. Node's stream backpressure holds the follower's events in its bounded
 * buffer while the socket is full; the hub cuts a client off that falls too far behind, and it gets
 * a last `error` event (code `unavailable`, `lastSeq` to resume after).
 */
import { Readable } from "node:stream"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Errors, Follower, Metrics, type TapeEvent } from "@palyra/core"
import { Effect, Exit, Fiber, Metric, Scope } from "effect"
import { toApiError } from "../Api.js"
import * as Sse from "../Sse.js"
import type { HandlerOptions } from "./common.js"

const openStreams = Metric.tagged(Metrics.openStreams, "transport", "http")

const tapeFrame = Follower.encodedOnce(
  (event: TapeEvent.TapeEvent): Uint8Array =>
    Sse.encode({ id: String(event.tapeSeq), event: event._tag, data: JSON.stringify(event) }),
  64,
  (frame) => frame.byteLength <= 64 * 1024
)

const frames = (events: ReadonlyArray<TapeEvent.TapeEvent>): Uint8Array =>
  events.length === 1 ? tapeFrame(events[0]!) : Buffer.concat(events.map(tapeFrame))

/**
 * The body: `follow` is run when the body is first read and the follower it gives is closed when
 * the body ends or is destroyed (client gone, server shutting down); a `Follower` given as it is
 * (one its caller opened in the caller's scope) is read from at once and closed likewise. The routes that start a run
 * hand over a follower attached at the run's admission (`Gateway.startRunFollowing`), which buffers
 * from then on, within the tape's live bound; a follower opened here reads from its `afterSeq`.
 * Keep-alive comments go out whenever nothing was sent for `heartbeatSeconds`; at shutdown — or
 * when `end` is called — the body ends cleanly after what it already holds.
 *
 * `endsItself`: the caller calls `end` at shutdown itself (the fast route does, from its own
 * shutdown watcher), so the body does not fork a fiber per stream to wait for it. `taken`: events
 * the caller already took from the follower (the start commit's, taken inside its publication),
 * sent first.
 *
 * @internal
 */
export const tapeBody = (
  options: HandlerOptions,
  follow: Effect.Effect<Follower.Follower, unknown, Scope.Scope> | Follower.Follower,
  endsItself = false,
  taken?: ReadonlyArray<TapeEvent.TapeEvent>
): { readonly body: Readable; readonly end: () => void } => {
  const heartbeat = options.heartbeatSeconds * 1000
  let follower: Follower.Follower | undefined
  let scope: Scope.CloseableScope | undefined
  let shutdown: Fiber.RuntimeFiber<void> | undefined
  let timer: ReturnType<typeof setTimeout> | undefined
  let wanted = false
  let opened = false
  let ended = false
  let lastPush = 0

  const push = (bytes: Uint8Array) => {
    lastPush = Date.now()
    wanted = body.push(bytes)
  }
  const end = () => {
    if (ended) return
    ended = true
    wanted = false
    body.push(null)
  }
  const beat = () => {
    timer = undefined
    if (ended) return
    const idle = Date.now() - lastPush
    if (idle >= heartbeat) {
      if (wanted) push(Sse.comment("keep-alive"))
      timer = setTimeout(beat, heartbeat)
    } else timer = setTimeout(beat, heartbeat - idle)
  }
  const wake = () => {
    if (wanted) pump()
  }
  // Take everything ready while the body wants more; when nothing is ready, wait for one wake-up.
  const pump = () => {
    const f = follower
    if (f === undefined || ended) return
    while (wanted) {
      const ready = f.take()
      if (ready === undefined) return f.onReady(wake)
      if (ready === Follower.Done) return end()
      if (Follower.isFailed(ready)) {
        const error = ready.failure
        if (!(error instanceof Errors.StreamLagged)) return body.destroy(error)
        push(Sse.encode({ event: "error", data: JSON.stringify({ ...toApiError(error), lastSeq: error.lastSeq }) }))
        return end()
      }
      if (ready.length > 0) push(frames(ready))
    }
  }
  const started = (opened: Follower.Follower) => {
    follower = opened
    // Already ended (a shutdown that was over before the body was first read): nothing more may be
    // pushed; the follower is closed with the body.
    if (ended) return
    push(Sse.comment("connected"))
    if (taken !== undefined && taken.length > 0) push(frames(taken))
    timer = setTimeout(beat, heartbeat)
    pump()
  }
  const open = () => {
    // The gauge moved directly (no fiber per stream to run `Metric.modify`; no labels to add here).
    openStreams.unsafeModify(1, [])
    opened = true
    if (!endsItself)
      shutdown = Effect.runFork(
        Effect.zipRight(
          options.shutdown,
          Effect.sync(() => end())
        )
      )
    // A follower the caller already holds (the routes that start a run: its scope is the caller's)
    // starts the body at once: no scope and no fiber to open it, nor another to close that scope.
    if (!Effect.isEffect(follow)) return started(follow)
    const scoped = Effect.runSync(Scope.make())
    scope = scoped
    Effect.runFork(Scope.extend(follow, scoped)).addObserver((exit) => {
      if (body.destroyed) return
      if (Exit.isFailure(exit)) return body.destroy(new Error("the tape stream could not start", { cause: exit.cause }))
      started(exit.value)
    })
  }

  const body = new Readable({
    read() {
      wanted = true
      if (!opened) open()
      else pump()
    },
    destroy(error, callback) {
      ended = true
      if (timer !== undefined) clearTimeout(timer)
      follower?.onReady(undefined)
      follower?.close()
      if (shutdown !== undefined) Effect.runFork(Fiber.interrupt(shutdown))
      if (opened) openStreams.unsafeModify(-1, [])
      if (scope !== undefined) {
        // Closed with the scope in the context, as `follow` ran: its finalizers (`addFinalizer`) diff
        // the closing fiber's refs against the ones they were added with and patch them both ways,
        // and a context without the `Scope` made that a context diff and two rebuilt contexts per
        // finalizer (~4% of the daemon's sampled allocation bytes per turn, bench/turn).
        Effect.runFork(Effect.provideService(Scope.close(scope, Exit.void), Scope.Scope, scope))
      }
      callback(error)
    }
  })

  return { body, end }
}

/**
 * The response whose body is `tapeBody`.
 *
 * @internal
 */
export const tapeResponse = (
  options: HandlerOptions,
  follow: Effect.Effect<Follower.Follower, unknown, Scope.Scope> | Follower.Follower
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.raw(tapeBody(options, follow).body, {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no", connection: "keep-alive" }
  })

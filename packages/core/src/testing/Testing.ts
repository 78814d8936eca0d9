/**
 * `@palyra/core/testing`: what you need to unit-test an agent. A real in-memory journal, a scripted
 * model that records its prompts, and a ready layer that wires them into a `Gateway`.
 *
 * ```ts
 * import { Testing } from "@palyra/core/testing"
 * const model = Testing.ScriptedModel.make([{ toolCalls: [{ name: "time.now" }] }, { text: "It is noon." }])
 * const layer = Testing.gatewayLayer({ model, tools: [timeNow] })
 * ```
 *
 * @since 0.1.0
 */
import { randomBytes } from "node:crypto"
import { Chunk, Effect, Exit, Layer, Metric, Option, Stream, Tracer } from "effect"
import * as MemoryJournal from "../adapters/MemoryJournal.js"
import * as ScriptedModel from "../adapters/ScriptedModel.js"
import * as Caller from "../domain/Caller.js"
import { InvalidTransition } from "../domain/Errors.js"
import * as RunState from "../domain/RunState.js"
import { isRunEnd, type NewTapeEvent, type TapeEvent } from "../domain/TapeEvent.js"
import { Gateway, type GatewayError, type Service as GatewayService } from "../kernel/Gateway.js"
import * as Kernel from "../kernel/Kernel.js"
import * as Metrics from "../kernel/Metrics.js"
import * as JournalPort from "../ports/Journal.js"
import { Journal } from "../ports/Journal.js"

export { ScriptedModel }

/** @since 0.1.0 @category Models */
export type GatewayLayerOptions<EJ = never, EP = never, EA = never> = Kernel.Options<EJ, EP, EA>

/**
 * A journal that refuses (as a defect) any `RunStateChanged` that is not a legal transition of the
 * run state machine, so every tape written in a test is checked.
 *
 * @since 0.1.0
 * @category Layers
 */
export const checkedJournal = <E, R>(journal: Layer.Layer<Journal, E, R>): Layer.Layer<Journal, E, R> =>
  Layer.effect(
    Journal,
    Effect.map(Journal, (inner) => {
      const illegal = (events: ReadonlyArray<NewTapeEvent>) => {
        for (const e of events) {
          if (e._tag === "RunStateChanged" && !RunState.isLegalChange(e.from, e.to))
            return new InvalidTransition({ from: e.from, transition: `-> ${e.to}` })
        }
        return undefined
      }
      const append: JournalPort.Service["append"] = (sessionId, events, effects) =>
        Effect.suspend(() => {
          const refused = illegal(events)
          return refused === undefined ? inner.append(sessionId, events, effects) : Effect.die(refused)
        })
      // The inner journal's plain form is kept (check, then the inner plain append), so the tape
      // takes the same path over this journal as the daemon's over its own (`Journal.appendNowOf`).
      const innerNow = JournalPort.appendNowOf(inner)
      return {
        ...inner,
        append:
          innerNow === undefined
            ? append
            : JournalPort.withAppendNow(append, (sessionId, events, effects, done) => {
                const refused = illegal(events)
                if (refused === undefined) innerNow(sessionId, events, effects, done)
                else done(Exit.die(refused))
              })
      }
    })
  ).pipe(Layer.provide(journal))

/**
 * The kernel (`Kernel.layer`) over the given model, tools and policy, with an in-memory journal by
 * default whose every run-state change is checked against the state machine. Every service the
 * Gateway uses is also in the output, so tests can inspect it.
 *
 * @since 0.1.0
 * @category Layers
 */
export const gatewayLayer = <EJ = never, EP = never, EA = never>(options: GatewayLayerOptions<EJ, EP, EA>) =>
  Kernel.layer({
    ...options,
    journal: checkedJournal(options.journal ?? (MemoryJournal.layer() as Layer.Layer<Journal, EJ>))
  })

/** A caller acting as `principal` (default `"tester"`). @since 0.1.0 @category Utils */
export const caller = (principal = "tester"): Caller.Caller => Caller.user(principal)

/** Collect a stream of events into an array. @since 0.1.0 @category Utils */
export const collect = <E, R>(stream: Stream.Stream<TapeEvent, E, R>): Effect.Effect<ReadonlyArray<TapeEvent>, E, R> =>
  Stream.runCollect(stream).pipe(Effect.map(Chunk.toReadonlyArray))

/** The tags of a list of events, for compact assertions. @since 0.1.0 @category Utils */
export const tags = (events: ReadonlyArray<TapeEvent>): Array<string> => events.map((e) => e._tag)

/** Assert seqs are 1..n (or from `first`) without gaps; returns a message or undefined. @since 0.1.0 @category Utils */
export const gapFree = (events: ReadonlyArray<TapeEvent>, first = 1): string | undefined => {
  for (let i = 0; i < events.length; i++) {
    if (events[i]!.tapeSeq !== first + i)
      return `expected tapeSeq ${first + i} at index ${i}, got ${events[i]!.tapeSeq}`
  }
  return undefined
}

/** A span a `recordingTracer` saw end. @since 0.1.0 @category Tracing */
export interface RecordedSpan {
  readonly name: string
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly kind: Tracer.SpanKind
  readonly attributes: ReadonlyMap<string, unknown>
}

/**
 * A real Effect `Tracer` that keeps every span it ends, in order (no exporter, no sampling), for
 * tests that check which spans an operation opens and how they nest. Install it with
 * `Effect.withTracer(tracer)` or `Layer.setTracer(tracer)`.
 *
 * @since 0.1.0
 * @category Tracing
 */
export const recordingTracer = (): { readonly tracer: Tracer.Tracer; readonly spans: Array<RecordedSpan> } => {
  const spans: Array<RecordedSpan> = []
  const tracer = Tracer.make({
    span(name, parent, context, links, startTime, kind) {
      const attributes = new Map<string, unknown>()
      const span: Tracer.Span = {
        _tag: "Span",
        name,
        traceId: Option.isSome(parent) ? parent.value.traceId : randomBytes(16).toString("hex"),
        spanId: randomBytes(8).toString("hex"),
        parent,
        context,
        status: { _tag: "Started", startTime },
        attributes,
        links,
        sampled: true,
        kind,
        end: () => {
          spans.push({
            name,
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: Option.getOrUndefined(parent)?.spanId,
            kind,
            attributes
          })
        },
        attribute: (key, value) => {
          attributes.set(key, value)
        },
        event: () => {},
        addLinks: () => {}
      }
      return span
    },
    context: (f) => f()
  })
  return { tracer, spans }
}

/**
 * The live followers attached to tapes, as the `palyra_tape_subscribers` gauge reads now (run it in
 * the runtime that serves the kernel).
 *
 * @since 0.1.0
 * @category Streams
 */
export const tapeSubscribers: Effect.Effect<number> = Effect.map(Metric.value(Metrics.tapeSubscribers), (s) => s.value)

/**
 * Reads `read` until `ok` holds, `intervalMs` apart (a real delay), at most `attempts` more times;
 * the last value read, so the test asserts on it.
 *
 * @since 0.1.0
 * @category Streams
 */
export const eventually = async <A>(
  read: () => Promise<A>,
  ok: (a: A) => boolean,
  options: { readonly attempts?: number; readonly intervalMs?: number } = {}
): Promise<A> => {
  let value = await read()
  for (let i = 0; i < (options.attempts ?? 100) && !ok(value); i++) {
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 20))
    value = await read()
  }
  return value
}

/**
 * A promise a test releases (or that releases itself after `ms`, so a failing test still ends);
 * `wait` is the Effect that waits for it.
 *
 * @since 0.1.0
 * @category Streams
 */
export const gate = (ms = 3000): { readonly release: () => void; readonly wait: () => Effect.Effect<void> } => {
  let release = () => {}
  const released = new Promise<void>((r) => {
    release = r
    setTimeout(r, ms)
  })
  return { release: () => release(), wait: () => Effect.promise(() => released) }
}

/**
 * A `Gateway` decorator whose `startRunFollowing` answers only once the inner call has returned and
 * the test's `afterStart` has completed (or failed); `returned` counts the calls that answered.
 *
 * @since 0.1.0
 * @category Layers
 */
export interface HeldStart {
  /** What the next `startRunFollowing` does with what the inner call returned (the test sets it). */
  afterStart: (
    started: Effect.Effect.Success<ReturnType<GatewayService["startRunFollowing"]>>
  ) => Effect.Effect<void, GatewayError>
  /** How many `startRunFollowing` calls have answered successfully. */
  returned: number
  /** Decorates the `Gateway` it is given (provide the kernel's under it). */
  readonly layer: Layer.Layer<Gateway, never, Gateway>
}

/**
 * A `HeldStart` over the real kernel's `startRunFollowing`: the test holds the call's answer (for a
 * stream that must begin from the start commit, before the call returns) or fails it after its commit.
 *
 * @since 0.1.0
 * @category Layers
 */
export const holdStartRunFollowing = (): HeldStart => {
  const held: HeldStart = {
    afterStart: () => Effect.void,
    returned: 0,
    layer: Layer.effect(
      Gateway,
      Effect.map(
        Gateway,
        (g): GatewayService => ({
          ...g,
          startRunFollowing: (...args) =>
            g.startRunFollowing(...args).pipe(
              Effect.tap((started) => held.afterStart(started)),
              Effect.tap(() =>
                Effect.sync(() => {
                  held.returned++
                })
              )
            )
        })
      )
    )
  }
  return held
}

/**
 * `inner` with a mark per run of whether the event loop's check phase after the run's end commit has
 * come: `checkPassed.get(runId)` is `false` from that commit until a `setImmediate` queued by it has
 * run, then `true`. For tests of work that must wait until the end's frames are sent (a deterministic
 * signal, no timing).
 * @since 0.1.0 @category Journals
 */
export const markingRunEndCheckPhase = (
  inner: JournalPort.Service
): { readonly journal: JournalPort.Service; readonly checkPassed: Map<string, boolean> } => {
  const checkPassed = new Map<string, boolean>()
  const journal: JournalPort.Service = {
    ...inner,
    append: (sessionId, events, effects) =>
      Effect.tap(inner.append(sessionId, events, effects), (stored) =>
        Effect.sync(() => {
          for (const e of stored)
            if (e.runId !== null && isRunEnd(e)) {
              const runId = e.runId
              checkPassed.set(runId, false)
              setImmediate(() => checkPassed.set(runId, true))
            }
        })
      )
  }
  return { journal, checkPassed }
}

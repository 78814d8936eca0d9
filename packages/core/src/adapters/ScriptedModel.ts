/**
 * A deterministic `ModelProvider` that plays a script of turns and records every prompt it was
 * given. It is honest about what it is: no model runs. Used by unit tests of agents, by benchmarks,
 * and by the daemon's offline `demo:scripted` model.
 *
 * @since 0.1.0
 */
import { Clock, Context, DefaultServices, Duration, Effect, Exit, Layer, Stream } from "effect"
import { ProviderError, type ProviderErrorReason } from "../domain/Errors.js"
import { writeNowOf } from "../ports/internal/writeNow.js"
import {
  drainNow,
  type FinishReason,
  type ModelEvent,
  ModelProvider,
  type ModelRequest,
  type Service,
  type SinkNow
} from "../ports/ModelProvider.js"

/** One scripted model response. @since 0.1.0 @category Models */
export interface ScriptedTurn {
  /** The answer text, as one string or as the deltas to stream. */
  readonly text?: string | ReadonlyArray<string> | undefined
  readonly toolCalls?:
    | ReadonlyArray<{ readonly name: string; readonly args?: unknown; readonly id?: string }>
    | undefined
  readonly usage?: { readonly inputTokens: number; readonly outputTokens: number } | undefined
  /** Pause before each delta (uses Effect's clock, so `TestClock` controls it). */
  readonly delayPerDelta?: Duration.DurationInput | undefined
  /** Fail the call instead of answering. */
  readonly fail?:
    | { readonly reason: ProviderErrorReason; readonly message: string; readonly retryable?: boolean }
    | undefined
  readonly finish?: FinishReason | undefined
}

/** A script: a list of turns played in order, or a function of the request and call index. @since 0.1.0 @category Models */
export type Script = ReadonlyArray<ScriptedTurn> | ((request: ModelRequest, index: number) => ScriptedTurn)

/** @since 0.1.0 @category Models */
export interface ScriptedModel extends Service {
  /** Every request the model received, in order. */
  readonly prompts: ReadonlyArray<ModelRequest>
}

/** @since 0.1.0 @category Constructors */
export const make = (
  script: Script,
  options: {
    readonly name?: string
    /** Keep every request in `prompts` (default true; the daemon's demo model turns it off). */
    readonly recordPrompts?: boolean
  } = {}
): ScriptedModel => {
  const name = options.name ?? "scripted"
  const record = options.recordPrompts ?? true
  const prompts: Array<ModelRequest> = []
  let calls = 0
  const next = (request: ModelRequest): ScriptedTurn | undefined => {
    const index = calls++
    if (record) prompts.push(request)
    return typeof script === "function" ? script(request, index) : script[index]
  }
  const plan = (request: ModelRequest): Effect.Effect<Plan, ProviderError> =>
    Effect.suspend(() => {
      const turn = next(request)
      if (turn === undefined) {
        return Effect.fail(
          new ProviderError({
            provider: name,
            reason: "script_exhausted",
            retryable: false,
            message: `the script has no turn ${calls}`
          })
        )
      }
      if (turn.fail) {
        return Effect.fail(
          new ProviderError({
            provider: name,
            reason: turn.fail.reason,
            retryable: turn.fail.retryable ?? false,
            message: turn.fail.message
          })
        )
      }
      const deltas = turn.text === undefined ? [] : typeof turn.text === "string" ? [turn.text] : turn.text
      const events: Array<ModelEvent> = deltas.map((text) => ({ type: "text-delta", text }))
      for (const [i, c] of (turn.toolCalls ?? []).entries()) {
        events.push({ type: "tool-call", id: c.id ?? `call_${calls}_${i}`, name: c.name, args: c.args ?? {} })
      }
      if (turn.usage) events.push({ type: "usage", ...turn.usage })
      events.push({ type: "finish", reason: turn.finish ?? (turn.toolCalls?.length ? "tool-calls" : "stop") })
      const delay = turn.delayPerDelta === undefined ? undefined : Duration.decode(turn.delayPerDelta)
      return Effect.succeed({ events, delay })
    })
  const pace = (event: ModelEvent, delay: Duration.Duration | undefined) =>
    delay !== undefined && event.type === "text-delta" ? Effect.sleep(delay) : Effect.void
  return {
    name,
    prompts,
    stream: (request) =>
      Stream.unwrap(
        Effect.map(plan(request), ({ events, delay }) =>
          Stream.fromIterable(events).pipe(Stream.tap((event) => pace(event, delay)))
        )
      ),
    streamTo: (request, sink) =>
      Effect.flatMap(plan(request), ({ events, delay }) =>
        Effect.forEach(events, (event) => Effect.zipRight(pace(event, delay), sink(event)), { discard: true })
      ),
    // Unpaced, the events are all due now: a plain drive (no Effect step per event the sink handles
    // plainly). Paced, each event waits for its delay, then the sink is called: on the live clock
    // with a plain timer (`pacedNow`), under another clock (`TestClock`) with its `sleep`.
    streamToNow: (request, sink) =>
      Effect.flatMap(plan(request), ({ events, delay }) =>
        delay === undefined
          ? drainNow(events, sink)
          : Effect.clockWith((clock) =>
              // A delay past what a timer takes (e.g. `Duration.infinity`) never fires on the live
              // clock's `sleep` either: that one keeps the Effect form.
              clock === liveClock && Duration.toMillis(delay) <= MAX_TIMER_MILLIS
                ? pacedNow(events, Duration.toMillis(delay), sink)
                : Effect.forEach(
                    events,
                    (event) =>
                      Effect.zipRight(
                        pace(event, delay),
                        Effect.suspend(() => sink(event) ?? Effect.void)
                      ),
                    { discard: true }
                  )
            )
      )
  }
}

/** The clock every fiber has unless a test (or a layer) replaced it. */
const liveClock = Context.get(DefaultServices.liveServices, Clock.Clock)
/** The longest delay `setTimeout` honours (Node fires a longer one after 1 ms). */
const MAX_TIMER_MILLIS = 2 ** 31 - 1

/**
 * Paced events into a plain sink on the live clock, in one `Effect.async` for the whole call: each
 * text delta waits `millis` on a plain timer whose callback calls the sink, and a write the sink
 * returns with a plain form (`withWriteNow`: the loop's held-delta write over the tape's plain
 * append) runs from that callback too — no fiber step per delta. What it replaces (per delta an
 * `Effect.sleep`, a `zipRight`, a `suspend`, `forEach`'s steps and two fiber resumptions around the
 * write) allocated most of what the scavenger collects at 200 paced streams (PERF-NOTES round 15,
 * slice P). A write without a plain form is run by the fiber, which then carries on here.
 * The order, the sink's writes (completed before the next event) and interruption are as before:
 * an interruption clears the pending timer (a delta not yet due never reaches the sink) and, while
 * a plain write is in flight, waits for it to complete (a write cannot be abandoned).
 */
const pacedNow = <E>(events: ReadonlyArray<ModelEvent>, millis: number, sink: SinkNow<E>): Effect.Effect<void, E> => {
  const from = (start: number): Effect.Effect<void, E> =>
    Effect.async<void, E>((resume) => {
      let timer: ReturnType<typeof setTimeout> | undefined
      let writing = false
      let interrupted = false
      let written: (() => void) | undefined
      // Hands `event` to the sink; true when the next event may follow at once.
      const call = (event: ModelEvent, after: number): boolean => {
        let next: Effect.Effect<void, E> | undefined
        try {
          next = sink(event)
        } catch (defect) {
          // Outside the fiber here: a sink that throws is the call's defect, as inside it.
          resume(Effect.die(defect))
          return false
        }
        if (next === undefined) return true
        const now = writeNowOf(next)
        if (now === undefined) {
          resume(Effect.flatMap(next, () => from(after)))
          return false
        }
        writing = true
        try {
          now((exit) => {
            writing = false
            if (interrupted) return written?.()
            if (Exit.isFailure(exit)) return resume(exit)
            step(after)
          })
        } catch (defect) {
          writing = false
          resume(Effect.die(defect))
        }
        return false
      }
      const step = (start: number): void => {
        let i = start
        while (i < events.length) {
          const event = events[i++]!
          const after = i
          if (event.type === "text-delta") {
            timer = setTimeout(() => {
              timer = undefined
              if (call(event, after)) step(after)
            }, millis)
            return
          }
          if (!call(event, after)) return
        }
        resume(Effect.void)
      }
      step(start)
      return Effect.suspend(() => {
        interrupted = true
        if (timer !== undefined) clearTimeout(timer)
        return writing
          ? Effect.async<void>((wake) => {
              // The write may have completed between the check above and this registration.
              if (!writing) return wake(Effect.void)
              written = () => wake(Effect.void)
            })
          : Effect.void
      })
    })
  return from(0)
}

interface Plan {
  readonly events: ReadonlyArray<ModelEvent>
  readonly delay: Duration.Duration | undefined
}

/** @since 0.1.0 @category Layers */
export const layer = (script: Script, options: { readonly name?: string } = {}): Layer.Layer<ModelProvider> =>
  Layer.succeed(ModelProvider, make(script, options))

/**
 * The offline demo model's script (`demo:scripted`): a few keyword-driven behaviours so the quick
 * start can show streaming, a low-risk tool, an approval and a denial without any API key. It says
 * plainly that it is a demo.
 *
 * - "time" → calls `time.now`; "list" / "files" → `fs.list`; "read <path>" → `fs.read`;
 *   "write" / "save" → `fs.write` (sensitive: needs approval); "sleep N" → `shell.exec sleep N`;
 *   "run" / "shell" → `shell.exec ls -la`;
 *   anything else → an explanation of what the demo can do.
 *
 * @since 0.1.0
 * @category Demo
 */
export const demoScript = (request: ModelRequest): ScriptedTurn => {
  const last = request.messages.at(-1)
  if (last?.role === "tool") {
    const shown = last.output.length > 400 ? `${last.output.slice(0, 400)}…` : last.output
    return {
      text: words(
        last.isError
          ? `The ${last.name} call did not go through: ${shown}`
          : `Here is what ${last.name} returned:\n${shown}`
      ),
      usage: { inputTokens: 40, outputTokens: 20 }
    }
  }
  const text = last?.role === "user" ? last.text.toLowerCase() : ""
  const has = (name: string) => request.tools.some((t) => t.name === name)
  const call = (name: string, args: unknown): ScriptedTurn => ({
    text: words(`(demo model) Calling ${name}.`),
    toolCalls: [{ name, args }],
    usage: { inputTokens: 30, outputTokens: 10 }
  })
  if (text.includes("time") && has("time.now")) return call("time.now", {})
  if ((text.includes("list") || text.includes("files")) && has("fs.list")) return call("fs.list", { path: "." })
  const read = /read\s+(\S+)/.exec(text)
  if (read && has("fs.read")) return call("fs.read", { path: read[1] })
  if ((text.includes("write") || text.includes("save")) && has("fs.write")) {
    return call("fs.write", { path: "notes/palyra-demo.txt", content: `Written by the Palyra demo at your request.\n` })
  }
  const sleep = /sleep\s+(\d{1,4})/.exec(text)
  if (sleep && has("shell.exec")) return call("shell.exec", { argv: ["sleep", sleep[1]] })
  if ((text.includes("run") || text.includes("shell")) && has("shell.exec")) {
    return call("shell.exec", { argv: ["ls", "-la"] })
  }
  return {
    text: words(
      'I am Palyra\'s offline demo model (no AI provider is configured). Ask me for the time, to list files, to read a file, to write a note (that needs your approval), or to run a command. Configure a real model with `model = "openai:gpt-4.1-mini"` in palyra.toml.'
    ),
    usage: { inputTokens: 20, outputTokens: 40 }
  }
}

const words = (text: string): ReadonlyArray<string> => text.match(/\S+\s*/g) ?? [text]

/**
 * `ModelProvider` over any AI SDK `LanguageModel` (OpenAI, Anthropic, OpenAI-compatible servers such
 * as Ollama, vLLM and llama.cpp, …).
 *
 * - Tools are declared to the model with their JSON Schemas but **without** `execute`: the SDK
 *   reports tool calls and Palyra's loop runs them, after policy and approval.
 * - Provider errors become typed `ProviderError`s (`rate_limit`, `auth`, `overloaded`, `bad_request`,
 *   `network`, `timeout`) with `retryable` set.
 * - Retryable errors are retried with exponential backoff and jitter, but only while nothing of the
 *   answer has been streamed yet (a retry after the first delta would duplicate text on the tape).
 * - `failover` tries configured models in order.
 * - Interrupting the fiber aborts the HTTP request.
 *
 * @since 0.1.0
 */
import { jsonSchema, type LanguageModel, type ModelMessage, streamText, type ToolSet, tool } from "ai"
import { Duration, Effect, Exit, Layer, Schedule, Stream } from "effect"
import { ProviderError } from "../../domain/Errors.js"
import { traced } from "../../ports/internal/traced.js"
import { writeNowOf } from "../../ports/internal/writeNow.js"
import {
  drainNow,
  type FinishReason,
  type ModelEvent,
  ModelProvider,
  type ModelRequest,
  type PromptMessage,
  runInto,
  runIntoNow,
  type Service,
  type SinkNow
} from "../../ports/ModelProvider.js"

/** Plain events in a row a call hands to its sink before the fiber gets a step (see `drain`). */
const yieldEvery = 256

/** @since 0.1.0 @category Models */
export interface Options {
  /** Name on the tape (default `provider:modelId`). */
  readonly name?: string | undefined
  /** Retries of retryable failures before anything streamed (default 3, base delay 500 ms, cap 20 s). */
  readonly retry?:
    | {
        readonly times?: number | undefined
        readonly baseDelay?: Duration.DurationInput | undefined
        readonly maxDelay?: Duration.DurationInput | undefined
      }
    | undefined
  readonly maxOutputTokens?: number | undefined
  readonly temperature?: number | undefined
}

const statusOf = (error: unknown): number | undefined => {
  const e = error as { statusCode?: unknown; lastError?: { statusCode?: unknown }; cause?: unknown } | null
  if (e && typeof e.statusCode === "number") return e.statusCode
  if (e?.lastError && typeof e.lastError.statusCode === "number") return e.lastError.statusCode
  return undefined
}

const NETWORK =
  /Cannot connect|ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EPIPE|socket hang up|fetch failed|terminated|network/i

/** Map anything the AI SDK throws to a typed `ProviderError`. @since 0.1.0 @category Errors */
export const classify =
  (provider: string) =>
  (error: unknown): ProviderError => {
    if (error instanceof ProviderError) return error
    const status = statusOf(error)
    const message = error instanceof Error ? error.message : String(error)
    const make = (reason: ProviderError["reason"], retryable: boolean) =>
      new ProviderError({
        provider,
        reason,
        retryable,
        message,
        ...(status === undefined ? {} : { status }),
        cause: error
      })
    if (status === 429) return make("rate_limit", true)
    if (status === 401 || status === 403) return make("auth", false)
    if (status === 408) return make("timeout", true)
    if (status !== undefined && status >= 500) return make("overloaded", true)
    if (status !== undefined && status >= 400) return make("bad_request", false)
    if ((error as { isRetryable?: unknown } | null)?.isRetryable === true && status === undefined) {
      return make("network", true)
    }
    const cause = (error as { cause?: unknown } | null)?.cause
    const text = `${message} ${cause instanceof Error ? `${cause.message} ${(cause as { code?: string }).code ?? ""}` : ""}`
    if (NETWORK.test(text)) return make("network", true)
    return make("unknown", false)
  }

// OpenAI-style function names allow only [a-zA-Z0-9_-]; Palyra's tool names use dots (fs.read).
const wireName = (name: string) => name.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 64)

/**
 * The AI SDK refuses system messages among `messages` ("use the instructions option instead"):
 * system messages (a compaction summary, injected memory) join the instructions, in order.
 */
const instructionsOf = (request: ModelRequest): string | undefined => {
  const parts = [
    ...(request.instructions === undefined ? [] : [request.instructions]),
    ...request.messages.flatMap((m) => (m.role === "system" ? [m.text] : []))
  ].filter((p) => p.length > 0)
  return parts.length === 0 ? undefined : parts.join("\n\n")
}

/** An assistant message's parts, the same for `streamText`'s messages and the provider's prompt. */
const assistantParts = (m: Extract<PromptMessage, { readonly role: "assistant" }>) => [
  ...(m.text.length > 0 ? [{ type: "text" as const, text: m.text }] : []),
  ...m.toolCalls.map((c) => ({
    type: "tool-call" as const,
    toolCallId: c.id,
    toolName: wireName(c.name),
    input: c.args
  }))
]

/** A tool message's result part, the same for `streamText`'s messages and the provider's prompt. */
const toolResultPart = (m: Extract<PromptMessage, { readonly role: "tool" }>) => ({
  type: "tool-result" as const,
  toolCallId: m.toolCallId,
  toolName: wireName(m.name),
  output: m.isError ? { type: "error-text" as const, value: m.output } : { type: "text" as const, value: m.output }
})

const toModelMessages = (messages: ReadonlyArray<PromptMessage>): Array<ModelMessage> =>
  messages.map((m): ModelMessage => {
    switch (m.role) {
      case "system":
        return { role: "system", content: m.text }
      case "user":
        // Images as v7 file parts (`ImagePart` is deprecated): the provider encodes them for its wire.
        return m.images === undefined || m.images.length === 0
          ? { role: "user", content: m.text }
          : {
              role: "user",
              content: [
                { type: "text", text: m.text },
                ...m.images.map((i) => ({
                  type: "file" as const,
                  data: { type: "data" as const, data: i.data },
                  mediaType: i.mediaType
                }))
              ]
            }
      case "assistant":
        return { role: "assistant", content: assistantParts(m) }
      default:
        return { role: "tool", content: [toolResultPart(m)] }
    }
  })

const finishReason = (reason: string | undefined): FinishReason =>
  reason === "stop" ||
  reason === "tool-calls" ||
  reason === "length" ||
  reason === "content-filter" ||
  reason === "error"
    ? reason
    : "other"

/** An AI SDK v7 provider model (the `LanguageModelV4` spec), called directly. */
type ModelV4 = Extract<LanguageModel, { readonly specificationVersion: "v4" }>
type CallOptions = Parameters<ModelV4["doStream"]>[0]
type Prompt = CallOptions["prompt"]

const asModelV4 = (model: LanguageModel): ModelV4 | undefined =>
  typeof model === "object" && model.specificationVersion === "v4" && typeof model.doStream === "function"
    ? model
    : undefined

/**
 * The provider-level prompt for messages without images — what `streamText` builds from
 * `toModelMessages` for them (instructions first as the one system message, text parts, tool calls
 * and tool results with wire names). Messages with images take `streamText` (it converts files).
 */
const toPrompt = (instructions: string | undefined, messages: ReadonlyArray<PromptMessage>): Prompt => {
  const prompt: Prompt = instructions === undefined ? [] : [{ role: "system", content: instructions }]
  for (const m of messages) {
    if (m.role === "system") continue
    let part = converted.get(m)
    if (part === undefined) {
      part = toPromptMessage(m)
      converted.set(m, part)
    }
    prompt.push(part)
  }
  return prompt
}

/**
 * Each message's provider form, kept while the message is: a session's conversation is folded once
 * and its messages are the same objects call after call (`PromptAssembler.makeFromHistory`), so a
 * call converts only its new ones. Providers read the prompt; none writes to it.
 */
const converted = new WeakMap<PromptMessage, Prompt[number]>()

const toPromptMessage = (m: Exclude<PromptMessage, { readonly role: "system" }>): Prompt[number] => {
  switch (m.role) {
    case "user":
      return { role: "user", content: [{ type: "text", text: m.text }] }
    case "assistant":
      return { role: "assistant", content: assistantParts(m) }
    default:
      return { role: "tool", content: [toolResultPart(m)] }
  }
}

/** A tool call's input as `streamText` parses it: empty is `{}`, unparsable JSON stays the raw text. */
const parseInput = (input: string): unknown => {
  if (input.trim() === "") return {}
  try {
    return JSON.parse(input)
  } catch {
    return input
  }
}

/** What a request's tools become, once per tool list (an agent's list is the same array run after run). */
interface Declared {
  readonly names: ReadonlyMap<string, string>
  readonly toolSet: ToolSet
  readonly functions: CallOptions["tools"]
}
const declared = new WeakMap<ModelRequest["tools"], Declared>()
const declare = (tools: ModelRequest["tools"]): Declared => {
  let found = declared.get(tools)
  if (found === undefined) {
    const toolSet: ToolSet = {}
    for (const t of tools) {
      toolSet[wireName(t.name)] = tool({ description: t.description, inputSchema: jsonSchema(t.parameters as never) })
    }
    found = {
      names: new Map(tools.map((t) => [wireName(t.name), t.name])),
      toolSet,
      functions:
        tools.length === 0
          ? undefined
          : tools.map((t) => ({
              type: "function" as const,
              name: wireName(t.name),
              description: t.description,
              inputSchema: t.parameters as never
            }))
    }
    declared.set(tools, found)
  }
  return found
}

const TURN_END: unique symbol = Symbol("turn end")

/**
 * Calls waiting for the current macrotask to end (`setImmediate`): a read that settles before it
 * was at hand in this turn (its data already received, travelling the provider's streams in
 * microtasks). One timer per turn for every call reading in it, and one wake-up per call per turn
 * (not per part: a burst's reads each settle first and leave nothing behind).
 */
let turnWaiters: Array<() => void> = []
const endTurn = () => {
  const waiters = turnWaiters
  turnWaiters = []
  for (const wake of waiters) wake()
}
const atTurnEnd = (wake: () => void) => {
  if (turnWaiters.length === 0) setImmediate(endTurn)
  turnWaiters.push(wake)
}

/** A stream part of either call path (`streamText`'s full stream, a v4 provider's `doStream`), in the adapter's terms. */
type Part =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "call"; readonly id: string; readonly name: string; readonly args: unknown }
  | {
      readonly type: "finish"
      readonly reason: FinishReason
      readonly inputTokens: number
      readonly outputTokens: number
    }
  | { readonly type: "error"; readonly error: unknown }

/**
 * Adapt an AI SDK language model.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (model: LanguageModel, options: Options = {}): Service => {
  const name =
    options.name ??
    (typeof model === "string"
      ? model
      : `${(model as { provider: string }).provider}:${(model as { modelId: string }).modelId}`)
  const toError = classify(name)
  const retry = options.retry ?? {}
  const schedule = Schedule.exponential(Duration.decode(retry.baseDelay ?? "500 millis"), 2).pipe(
    Schedule.jittered,
    Schedule.union(Schedule.spaced(Duration.decode(retry.maxDelay ?? "20 seconds"))),
    Schedule.intersect(Schedule.recurs(retry.times ?? 3))
  )

  /** A call with an abort signal: aborted (the HTTP request closed) unless it succeeds. */
  const withAbort = <A, E, R>(use: (signal: AbortSignal) => Effect.Effect<A, E, R>) =>
    Effect.acquireUseRelease(
      Effect.sync(() => new AbortController()),
      (controller) => use(controller.signal),
      (controller, exit) => Effect.sync(() => (Exit.isSuccess(exit) ? undefined : controller.abort()))
    )

  /**
   * Stream parts, read in the adapter's terms (`Part`), to a plain sink (`SinkNow`); usage and the
   * finish last. Parts are read and handed to the sink in one promise until the sink returns an
   * effect (run, in the fiber, before the next part) or the stream ends: a delta the sink only
   * buffers costs a plain call, not an Effect step, and parts the adapter skips (stream and text
   * starts and ends, response metadata) cost nothing either. The promise checks `stopped` (set
   * first thing when the fiber is interrupted: no `AbortController` per read) after every read, so
   * the sink is never called once the call was interrupted (between an interruption's request and
   * the fiber acting on it, one more event may reach the sink; what it returns is never run); and
   * it hands control back to the fiber
   * after `yieldEvery` plain events in a row, so a long buffered burst can still be interrupted
   * between deltas.
   *
   * `more` (one event of look-ahead): an event read is held while the next `read()` runs; if that
   * read settles before this macrotask ends (`atTurnEnd`: the parts of one socket read — one burst of
   * SSE lines — travel the provider's pipe chain in microtasks), the held event goes to the sink
   * with `more: true` and the next one is held; else with `more: false` when the turn ends, and the
   * read is awaited after. So an event reaches the sink at the latest at the end of the turn it was
   * read in, never after a later network read. An error part or a failed read hands the event held
   * to the sink without `more` (its write runs) before the call fails, so the sink holds nothing
   * then; an interruption drops an event the adapter holds unseen, and the sink may still hold the
   * events it was given with `more` (the loop writes them when the call is interrupted).
   */
  const drain = <P>(
    stream: ReadableStream<P>,
    toPart: (part: P) => Part | undefined,
    names: ReadonlyMap<string, string>,
    sink: SinkNow<unknown>,
    progress: { emitted: number }
  ): Effect.Effect<void, unknown> =>
    Effect.suspend(() => {
      const reader = stream.getReader()
      let reason: FinishReason = "other"
      let inputTokens = 0
      let outputTokens = 0
      let ended = false
      let stopped = false
      // The event read and not yet handed to the sink (see `more` above), and a read started
      // while it was held that the turn's end overtook (the next stretch awaits it first).
      let held: ModelEvent | undefined
      let reading: ReturnType<typeof reader.read> | undefined
      // The look-ahead's wait: the read's result, or `TURN_END` when the turn ends first (this
      // call is registered for the turn's end at most once: `armed`).
      type Read = Awaited<typeof reading & {}>
      let settle: ((next: Read | typeof TURN_END) => void) | undefined
      let armed = false
      const onTurnEnd = () => {
        armed = false
        const wake = settle
        settle = undefined
        wake?.(TURN_END)
      }
      const readOrTurnEnd = (read: Promise<Read>) =>
        new Promise<Read | typeof TURN_END>((resolve, reject) => {
          settle = resolve
          read.then((next) => {
            if (settle === resolve) settle = undefined
            resolve(next)
          }, reject)
          if (!armed) {
            armed = true
            atTurnEnd(onTurnEnd)
          }
        })
      // The effect the fiber runs next (a write the sink returned, a failure, the tail), or
      // `Effect.void` to read on after `yieldEvery` plain events.
      // A sink that throws is a defect of its caller (the kernel), not a provider error: it is
      // handed to the fiber as one, as when the sink runs in the fiber.
      const call = (event: ModelEvent, more: boolean): Effect.Effect<void, unknown> | undefined => {
        try {
          return sink(event, more)
        } catch (defect) {
          ended = true
          return Effect.die(defect)
        }
      }
      // A failed read or an error part: the event held goes to the sink first (without `more`, so
      // the sink holds nothing when the call fails), and its write runs before the failure.
      // A write the sink returned with a plain form (`withWriteNow`: the loop's held deltas over the
      // tape's plain append) runs from the pump, which awaits its exit and reads on — no fiber
      // stretch per write (PERF-NOTES round 15, slice P). `undefined` when the write has no plain
      // form: the fiber runs it. An interruption meanwhile waits for the write (`onInterrupt` below):
      // a started write is never abandoned, as under the loop's `uninterruptible`.
      let written: (() => void) | undefined
      let writing = false
      const writePlain = (out: Effect.Effect<void, unknown>) => {
        const now = writeNowOf(out)
        if (now === undefined) return undefined
        writing = true
        return new Promise<Exit.Exit<void, unknown>>((resolve) => {
          try {
            now((exit) => {
              writing = false
              resolve(exit)
              written?.()
            })
          } catch (defect) {
            // A plain write that throws is the kernel's defect, not the provider's failure.
            writing = false
            resolve(Exit.die(defect))
          }
        })
      }
      // `out` written: its plain form awaited here (`undefined`: done, read on), else what the
      // stretch returns instead — `out` itself for the fiber to run, the interruption, the failure.
      const writeOut = async (out: Effect.Effect<void, unknown>): Promise<Effect.Effect<void, unknown> | undefined> => {
        const wrote = writePlain(out)
        if (wrote === undefined) return out
        const exit = await wrote
        if (stopped) return Effect.interrupt
        return Exit.isFailure(exit) ? exit : undefined
      }
      const fail = (error: unknown): Effect.Effect<void, unknown> => {
        ended = true
        const last = held
        held = undefined
        const failure = Effect.fail(toError(error))
        if (last === undefined) return failure
        const out = call(last, false)
        return out === undefined ? failure : Effect.zipRight(out, failure)
      }
      const pump = async (): Promise<Effect.Effect<void, unknown>> => {
        let plain = 0
        while (true) {
          const read = reading ?? reader.read()
          reading = undefined
          let next: Awaited<typeof read>
          try {
            if (held === undefined) next = await read
            else {
              const first = await readOrTurnEnd(read)
              if (stopped) return Effect.interrupt
              if (first === TURN_END) {
                // Nothing more at hand this turn: the held event goes now, the read is awaited next.
                reading = read
                const event = held
                held = undefined
                const out = call(event, false)
                const stop = out === undefined ? undefined : await writeOut(out)
                if (stop !== undefined) return stop
                if (++plain === yieldEvery) return Effect.void
                continue
              }
              next = first
            }
          } catch (error) {
            if (stopped) return Effect.interrupt
            return fail(error)
          }
          if (stopped) return Effect.interrupt
          if (next.done) {
            ended = true
            const tail: Array<ModelEvent> = held === undefined ? [] : [held]
            held = undefined
            if (inputTokens + outputTokens > 0) tail.push({ type: "usage", inputTokens, outputTokens })
            tail.push({ type: "finish", reason })
            return drainNow(tail, sink)
          }
          const part = toPart(next.value)
          if (part === undefined) continue
          let event: ModelEvent
          switch (part.type) {
            case "text":
              if (part.text.length === 0) continue
              progress.emitted++
              event = { type: "text-delta", text: part.text }
              break
            case "call":
              progress.emitted++
              event = { type: "tool-call", id: part.id, name: names.get(part.name) ?? part.name, args: part.args }
              break
            case "finish":
              reason = part.reason
              inputTokens = part.inputTokens
              outputTokens = part.outputTokens
              continue
            case "error":
              return fail(part.error)
          }
          const before = held
          held = event
          if (before === undefined) continue
          // The next event is at hand: `more`, unless the stretch yields after this one.
          const out = call(before, plain + 1 < yieldEvery)
          const stop = out === undefined ? undefined : await writeOut(out)
          if (stop !== undefined) return stop
          if (++plain === yieldEvery) return Effect.void
        }
      }
      // `try` takes no signal: with one, `tryPromise` makes an `AbortController` and wraps its
      // await in an `onInterrupt` per stretch — `stopped` (below) is what the pump checks.
      const step: Effect.Effect<void, unknown> = Effect.flatMap(
        Effect.tryPromise({ try: () => pump(), catch: toError }),
        (next) => (ended ? next : Effect.zipRight(next, step))
      )
      // Innermost, so it runs before any other finalizer of the call (the request's abort among them).
      return Effect.onInterrupt(step, () =>
        Effect.suspend(() => {
          stopped = true
          return writing
            ? Effect.async<void>((wake) => {
                // The write may have completed between the check above and this registration.
                if (!writing) return wake(Effect.void)
                written = () => wake(Effect.void)
              })
            : Effect.void
        })
      )
    })

  // The call settings both paths pass (only those configured).
  const settings = {
    ...(options.maxOutputTokens === undefined ? {} : { maxOutputTokens: options.maxOutputTokens }),
    ...(options.temperature === undefined ? {} : { temperature: options.temperature })
  }
  const attempt = (request: ModelRequest, sink: SinkNow<unknown>, progress: { emitted: number }) =>
    withAbort((abortSignal) =>
      Effect.gen(function* () {
        const { names, toolSet: tools } = declare(request.tools)
        const instructions = instructionsOf(request)
        const result = yield* Effect.try({
          try: () =>
            streamText({
              model,
              ...(instructions === undefined ? {} : { instructions }),
              messages: toModelMessages(request.messages.filter((m) => m.role !== "system")),
              tools,
              maxRetries: 0,
              abortSignal,
              // Errors arrive as stream parts and are mapped below; the SDK's default logs them to stderr.
              onError: () => {},
              ...settings
            }),
          catch: toError
        })
        yield* drain(
          result.fullStream,
          (part): Part | undefined => {
            switch (part.type) {
              case "text-delta":
                return { type: "text", text: part.text }
              case "tool-call":
                return { type: "call", id: part.toolCallId, name: part.toolName, args: part.input ?? {} }
              case "finish":
                return {
                  type: "finish",
                  reason: finishReason(part.finishReason),
                  inputTokens: part.totalUsage.inputTokens ?? 0,
                  outputTokens: part.totalUsage.outputTokens ?? 0
                }
              case "error":
                return { type: "error", error: part.error }
              default:
                return undefined
            }
          },
          names,
          sink,
          progress
        )
      })
    )

  /**
   * The same call straight through the provider's `doStream`, for a v4 model and a prompt without
   * images: `streamText`'s step, telemetry and stream-transform machinery is ~1 ms of CPU per call
   * that this adapter does not use (it runs one step, executes no tools, reads the parts below).
   */
  const direct = asModelV4(model)
  const attemptDirect = (v4: ModelV4, request: ModelRequest, sink: SinkNow<unknown>, progress: { emitted: number }) =>
    withAbort((abortSignal) =>
      Effect.gen(function* () {
        const { names, functions } = declare(request.tools)
        const result = yield* Effect.tryPromise({
          try: () =>
            v4.doStream({
              prompt: toPrompt(instructionsOf(request), request.messages),
              ...(functions === undefined ? {} : { tools: functions }),
              toolChoice: { type: "auto" },
              abortSignal,
              ...settings
            }),
          catch: toError
        })
        yield* drain(
          result.stream,
          (part): Part | undefined => {
            switch (part.type) {
              case "text-delta":
                return { type: "text", text: part.delta }
              case "tool-call":
                return { type: "call", id: part.toolCallId, name: part.toolName, args: parseInput(part.input) ?? {} }
              case "finish":
                return {
                  type: "finish",
                  reason: finishReason(part.finishReason.unified),
                  inputTokens: part.usage.inputTokens.total ?? 0,
                  outputTokens: part.usage.outputTokens.total ?? 0
                }
              case "error":
                return { type: "error", error: part.error }
              default:
                return undefined
            }
          },
          names,
          sink,
          progress
        )
      })
    )

  const hasImages = (request: ModelRequest) =>
    request.messages.some((m) => m.role === "user" && m.images !== undefined && m.images.length > 0)

  // One call path for both sink forms: `streamTo`'s sink always returns an effect, which `drain`
  // runs before the next part, exactly as before; `streamToNow`'s returns one only when it must.
  const streamToNow: NonNullable<Service["streamToNow"]> = (request, sink) => {
    const progress = { emitted: 0 }
    const call =
      direct !== undefined && !hasImages(request)
        ? attemptDirect(direct, request, sink, progress)
        : attempt(request, sink, progress)
    const retryable = (e: unknown) => e instanceof ProviderError && e.retryable && progress.emitted === 0
    // The retry's schedule driver (its refs, the iteration metadata it provides to the call, which
    // copies the context) is built on the first failure, not per call: the first failure is handed to
    // `Effect.retry` as its first attempt's, so the schedule decides on it exactly as before — every
    // failure, retryable or not, steps it as before (its jitter draws from the run's `Random`, so a
    // seeded run's later ids stay what they were).
    const retried = Effect.catchAll(call, (first) => {
      let failed = false
      const again = Effect.suspend(() => {
        if (failed) return call
        failed = true
        return Effect.fail(first)
      })
      return Effect.retry(again, { schedule, while: retryable })
    })
    // Once per model call: no span object when no tracer reads spans.
    return traced("AiSdkModel.stream", { attributes: { model: name }, captureStackTrace: false })(retried)
  }

  const streamTo: NonNullable<Service["streamTo"]> = streamToNow
  return {
    name,
    streamTo,
    streamToNow,
    stream: (request) => toStream(streamTo, request)
  }
}

/** A `Stream` view of a push-based call. @internal */
const toStream = (streamTo: NonNullable<Service["streamTo"]>, request: ModelRequest) =>
  Stream.asyncPush<ModelEvent, ProviderError>((emit) =>
    Effect.forkScoped(
      streamTo(request, (event) => Effect.sync(() => void emit.single(event))).pipe(
        Effect.matchCause({
          onFailure: (cause) => emit.halt(cause as never),
          onSuccess: () => emit.end()
        })
      )
    )
  )

/**
 * Try each model in order: move to the next when one fails before it streamed anything (after its
 * own retries). A failure after the first delta is final: switching models mid-answer would splice
 * two answers together.
 *
 * @since 0.1.0
 * @category Combinators
 */
export const failover = (models: ReadonlyArray<Service>): Service => {
  if (models.length === 0) throw new Error("failover needs at least one model")
  if (models.length === 1) return models[0]!
  const name = models.map((m) => m.name).join(" > ")
  // Both sink forms share one failover: `run` is how one model is called with the counting sink.
  const over =
    <S extends SinkNow<unknown>>(run: (model: Service, counted: S) => Effect.Effect<void, unknown>) =>
    (sink: S): Effect.Effect<void, unknown> =>
      Effect.suspend(() => {
        let emitted = 0
        const counted = ((event: ModelEvent, more?: boolean) => {
          emitted++
          return sink(event, more)
        }) as S
        const tryFrom = (i: number): Effect.Effect<void, unknown> => {
          const model = models[i]!
          const run1 = run(model, counted)
          return i === models.length - 1
            ? run1
            : run1.pipe(
                Effect.catchAll((error) =>
                  emitted > 0
                    ? Effect.fail(error)
                    : Effect.logWarning(
                        `model ${model.name} failed; failing over to ${models[i + 1]!.name}`,
                        error
                      ).pipe(Effect.zipRight(tryFrom(i + 1)))
                )
              )
        }
        return tryFrom(0)
      })
  const streamTo: NonNullable<Service["streamTo"]> = (request, sink) =>
    over<(event: ModelEvent) => Effect.Effect<void, unknown>>((model, counted) => runInto(model, request, counted))(
      sink
    )
  const streamToNow: NonNullable<Service["streamToNow"]> = (request, sink) =>
    over<SinkNow<unknown>>((model, counted) => runIntoNow(model, request, counted))(sink)
  return { name, streamTo, streamToNow, stream: (request) => toStream(streamTo, request) }
}

/** @since 0.1.0 @category Layers */
export const layer = (model: LanguageModel, options: Options = {}): Layer.Layer<ModelProvider> =>
  Layer.succeed(ModelProvider, make(model, options))

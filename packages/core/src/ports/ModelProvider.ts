/**
 * The `ModelProvider` port: one streaming call to a language model. Implementations adapt the AI
 * SDK (`AiSdkModel`), or play a script (`ScriptedModel` in `@palyra/core/testing`, also the daemon's
 * offline `demo` model).
 *
 * Providers never execute tools: they report tool calls, and Palyra's loop decides, after policy
 * and approval, whether to run them.
 *
 * @since 0.1.0
 */
import { Context, Effect, Stream } from "effect"
import type { ProviderError } from "../domain/Errors.js"

/** An image of a user message: its bytes and media type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`). @since 0.1.0 @category Models */
export interface ImagePart {
  readonly data: Uint8Array
  readonly mediaType: string
}

/** A message of the prompt, provider-neutral. @since 0.1.0 @category Models */
export type PromptMessage =
  | { readonly role: "system"; readonly text: string }
  | {
      readonly role: "user"
      readonly text: string
      /** Images that come with the message (only for models that accept images). */
      readonly images?: ReadonlyArray<ImagePart> | undefined
    }
  | {
      readonly role: "assistant"
      readonly text: string
      readonly toolCalls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly args: unknown }>
    }
  | {
      readonly role: "tool"
      readonly toolCallId: string
      readonly name: string
      readonly output: string
      readonly isError: boolean
    }

/** A tool as the model sees it: name, description and JSON Schema of its parameters. @since 0.1.0 @category Models */
export interface ToolSpec {
  readonly name: string
  readonly description: string
  readonly parameters: Record<string, unknown>
}

/** @since 0.1.0 @category Models */
export interface ModelRequest {
  readonly instructions?: string | undefined
  readonly messages: ReadonlyArray<PromptMessage>
  readonly tools: ReadonlyArray<ToolSpec>
}

/** @since 0.1.0 @category Models */
export type FinishReason = "stop" | "tool-calls" | "length" | "content-filter" | "error" | "other"

/** What a provider streams back. @since 0.1.0 @category Models */
export type ModelEvent =
  | { readonly type: "text-delta"; readonly text: string }
  | { readonly type: "tool-call"; readonly id: string; readonly name: string; readonly args: unknown }
  | { readonly type: "usage"; readonly inputTokens: number; readonly outputTokens: number }
  | { readonly type: "finish"; readonly reason: FinishReason }

/** @since 0.1.0 @category Models */
export interface Service {
  /** A name for the tape, e.g. `openai:gpt-4.1-mini` or `demo:scripted`. */
  readonly name: string
  /** One model call. Interrupting the stream must abort the underlying request. */
  readonly stream: (request: ModelRequest) => Stream.Stream<ModelEvent, ProviderError>
  /**
   * The same call, pushing each event into `sink` in order. Optional: the agent loop uses it when
   * present because it avoids a `Stream` per model turn (measurable in tight tool loops); without
   * it the loop consumes `stream`. Interrupting the effect must abort the request.
   */
  readonly streamTo?: (
    request: ModelRequest,
    sink: (event: ModelEvent) => Effect.Effect<void, unknown>
  ) => Effect.Effect<void, unknown>
  /**
   * The same call into a plain sink (`SinkNow`): the provider calls `sink` when an event is due and
   * runs (and waits for) the effect it returns, if any, before its next event. Optional, additive:
   * the agent loop uses it when present (most deltas cost a plain call, no Effect step), else
   * `streamTo`, else `stream`. Interrupting the effect must abort the request.
   */
  readonly streamToNow?: (request: ModelRequest, sink: SinkNow<unknown>) => Effect.Effect<void, unknown>
}

/**
 * A sink handling an event with a plain call. It returns `undefined` when the event is handled, or
 * an effect (a write, a failure) that the caller must run, and wait for, before the next event:
 * the sink's state already counts that effect as done, so it may not be dropped or reordered.
 *
 * `more` (optional, additive) is the provider's promise that the next event is already at hand (the
 * same read, the same buffered burst) and that it will call the sink again before waiting for
 * anything but an effect the sink returns: the sink may then hold this event's write and join it to
 * the next one's (one append for the events of one read). A call without `more` must leave nothing
 * held: whatever the sink holds is in the effect it returns. A provider that cannot tell passes
 * nothing, and every event is written as it arrives. A call may still fail, or be interrupted, after
 * a `more`: whoever holds events then writes them as the call ends (the loop does, in a finalizer).
 *
 * @since 0.1.0
 * @category Models
 */
export type SinkNow<E> = (event: ModelEvent, more?: boolean) => Effect.Effect<void, E> | undefined

/**
 * Run one model call into a sink, through `streamTo` when the provider has it.
 *
 * @since 0.1.0
 * @category Utils
 */
export const runInto = <E>(
  model: Service,
  request: ModelRequest,
  sink: (event: ModelEvent) => Effect.Effect<void, E>
): Effect.Effect<void, E | ProviderError> =>
  model.streamTo
    ? (model.streamTo(request, sink) as Effect.Effect<void, E | ProviderError>)
    : Stream.runForEach(model.stream(request), sink)

/**
 * Run one model call into a plain sink: through `streamToNow` when the provider has it, else
 * through `streamTo`/`stream` with the sink called lazily, once per event, when the event is due.
 *
 * @since 0.1.0
 * @category Utils
 */
export const runIntoNow = <E>(
  model: Service,
  request: ModelRequest,
  sink: SinkNow<E>
): Effect.Effect<void, E | ProviderError> =>
  model.streamToNow
    ? (model.streamToNow(request, sink) as Effect.Effect<void, E | ProviderError>)
    : runInto(model, request, (event) => Effect.suspend(() => sink(event) ?? Effect.void))

/**
 * Drive a plain sink over events that are all available now (a provider's helper for `streamToNow`):
 * consecutive events the sink handles plainly cost no Effect step; an effect it returns is run
 * before the next event. After `yieldEvery` plain events in a row it yields to the runtime once, so
 * a long run of buffered deltas still lets other fibers run and an interruption in between deltas
 * (the per-event Effect steps this replaces gave the runtime that chance every few hundred events).
 * Each call but the last before a yield or the end says `more` (the next event is at hand), so the
 * sink may write up to `yieldEvery` events in one append.
 *
 * @since 0.1.0
 * @category Utils
 */
export const drainNow = <E>(
  events: ReadonlyArray<ModelEvent>,
  sink: SinkNow<E>,
  yieldEvery = 256
): Effect.Effect<void, E> => {
  const from = (start: number): Effect.Effect<void, E> => {
    let i = start
    let plain = 0
    while (i < events.length) {
      const event = events[i++]!
      const next = sink(event, i < events.length && plain + 1 < yieldEvery)
      if (next !== undefined) return i < events.length ? Effect.flatMap(next, () => from(i)) : next
      if (++plain === yieldEvery && i < events.length) return Effect.flatMap(Effect.yieldNow(), () => from(i))
    }
    return Effect.void
  }
  return Effect.suspend(() => from(0))
}

/** @since 0.1.0 @category Tags */
export class ModelProvider extends Context.Tag("@palyra/core/ModelProvider")<ModelProvider, Service>() {}

const toolCharsCache = new WeakMap<ToolSpec, number>()
const toolChars = (t: ToolSpec): number => {
  let n = toolCharsCache.get(t)
  if (n === undefined) {
    n = t.name.length + t.description.length + JSON.stringify(t.parameters).length
    toolCharsCache.set(t, n)
  }
  return n
}

// A conversation's messages are built once and kept by the prompt stage's memo: measure each
// assistant message's calls once (keyed by the calls array and its length, so a changed one is remeasured).
const toolCallCharsCache = new WeakMap<object, readonly [number, number]>()
const toolCallChars = (calls: ReadonlyArray<unknown>): number => {
  const known = toolCallCharsCache.get(calls)
  if (known !== undefined && known[0] === calls.length) return known[1]
  const n = JSON.stringify(calls).length
  toolCallCharsCache.set(calls, [calls.length, n])
  return n
}

/**
 * The characters one message counts for in `estimateTokens`.
 *
 * @since 0.1.0
 * @category Utils
 */
export const messageChars = (m: PromptMessage): number =>
  m.role === "tool"
    ? m.output.length + m.name.length
    : m.role === "assistant"
      ? m.text.length + toolCallChars(m.toolCalls)
      : m.text.length

// A run's tool list is one array for all its calls: its characters are summed once (keyed by the
// array and its length, like the calls above).
const toolsCharsCache = new WeakMap<ReadonlyArray<ToolSpec>, readonly [number, number]>()
const toolsChars = (tools: ReadonlyArray<ToolSpec>): number => {
  const known = toolsCharsCache.get(tools)
  if (known !== undefined && known[0] === tools.length) return known[1]
  let n = 0
  for (const t of tools) n += toolChars(t)
  toolsCharsCache.set(tools, [tools.length, n])
  return n
}

/** Rough token estimate (4 characters a token) used for budget checks before a call. @since 0.1.0 @category Utils */
export const estimateTokens = (request: ModelRequest): number => {
  let chars = 0
  for (const m of request.messages) chars += messageChars(m)
  return estimateTokensWith(request, chars)
}

/**
 * `estimateTokens` for a request whose messages' characters (`messageChars` summed) are already
 * known — a prompt stage that keeps the sum as its conversation grows — without walking them again.
 *
 * @since 0.1.0
 * @category Utils
 */
export const estimateTokensWith = (request: ModelRequest, messagesChars: number): number =>
  Math.ceil(((request.instructions?.length ?? 0) + messagesChars + toolsChars(request.tools)) / 4)

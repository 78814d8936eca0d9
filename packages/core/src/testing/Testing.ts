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
import { Chunk, Effect, Layer, Stream } from "effect"
import * as MemoryJournal from "../adapters/MemoryJournal.js"
import * as ScriptedModel from "../adapters/ScriptedModel.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import * as Approvals from "../kernel/Approvals.js"
import * as Gateway from "../kernel/Gateway.js"
import type * as Journal from "../ports/Journal.js"
import { ModelProvider, type Service as ModelService } from "../ports/ModelProvider.js"
import * as PolicyEngine from "../ports/PolicyEngine.js"
import * as Tool from "../ports/Tool.js"

export { ScriptedModel }

/** @since 0.1.0 @category Models */
export interface GatewayLayerOptions extends Gateway.Options {
  readonly model: ModelService
  readonly tools?: ReadonlyArray<Tool.AnyTool> | undefined
  /** Policy rules (default: `PolicyEngine.defaultRules`). */
  readonly rules?: ReadonlyArray<PolicyEngine.Rule> | undefined
  /** A policy engine layer that replaces `rules`. */
  readonly policy?: Layer.Layer<PolicyEngine.PolicyEngine> | undefined
  /** The journal (default: a fresh in-memory journal). */
  readonly journal?: Layer.Layer<Journal.Journal, unknown> | undefined
}

/**
 * A Gateway over the given model, tools and policy, with the journal and approvals it used, ready
 * to `Effect.provide`. Every service the Gateway uses is also in the output, so tests can inspect it.
 *
 * @since 0.1.0
 * @category Layers
 */
export const gatewayLayer = (options: GatewayLayerOptions) => {
  const journal = (options.journal ?? MemoryJournal.layer()) as Layer.Layer<Journal.Journal, never>
  const services = Layer.mergeAll(
    Layer.succeed(ModelProvider, options.model),
    Tool.layer(options.tools ?? []),
    options.policy ?? PolicyEngine.layerRules(options.rules ?? PolicyEngine.defaultRules),
    Approvals.layer
  ).pipe(Layer.provideMerge(journal))
  return Gateway.layer(options).pipe(Layer.provideMerge(services))
}

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

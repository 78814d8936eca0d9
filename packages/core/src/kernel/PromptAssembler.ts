/**
 * The prompt-assembly stage: it turns a run's history into the model request. This is where the
 * context engine plugs in — compaction summaries, injected memory, resolved context references and
 * attachments are added here, counted against the model's window — so the agent loop never changes
 * when the prompt gets smarter.
 *
 * The default assembler rebuilds the conversation from the tape (a compaction replaces the range it
 * covers with its summary) and estimates tokens from characters.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import type { PalyraError } from "../domain/Errors.js"
import type { RunId } from "../domain/Ids.js"
import type { Session } from "../domain/Records.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import { estimateTokens, type ModelRequest, type ToolSpec } from "../ports/ModelProvider.js"
import { buildMessages } from "./internal/history.js"

/** What a run hands to the assembler before each model call. @since 0.1.0 @category Models */
export interface AssembleInput {
  readonly session: Session
  readonly runId: RunId
  /** The session's prompt history in tape order: a branch's inherited events first, then its own since the last reset. */
  readonly history: ReadonlyArray<TapeEvent>
  readonly instructions: string | undefined
  readonly tools: ReadonlyArray<ToolSpec>
}

/** @since 0.1.0 @category Models */
export interface Assembled {
  readonly request: ModelRequest
  /** Tokens the request is expected to use (what budgets are checked against). */
  readonly estimatedTokens: number
}

/** @since 0.1.0 @category Models */
export interface Service {
  readonly assemble: (input: AssembleInput) => Effect.Effect<Assembled, PalyraError>
}

/** @since 0.1.0 @category Tags */
export class PromptAssembler extends Context.Tag("@palyra/core/PromptAssembler")<PromptAssembler, Service>() {}

/** The default stage: the conversation as the tape tells it. @since 0.1.0 @category Constructors */
export const fromHistory: Service = {
  assemble: (input) =>
    Effect.sync(() => {
      const request: ModelRequest = {
        instructions: input.instructions,
        messages: buildMessages(input.history),
        tools: input.tools
      }
      return { request, estimatedTokens: estimateTokens(request) }
    })
}

/** @since 0.1.0 @category Layers */
export const layer: Layer.Layer<PromptAssembler> = Layer.succeed(PromptAssembler, fromHistory)

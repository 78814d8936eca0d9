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
import type { RunId, SessionId } from "../domain/Ids.js"
import type { Session } from "../domain/Records.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import { estimateTokensWith, type ModelRequest, type ToolSpec } from "../ports/ModelProvider.js"
import { emptyFold, foldedChars, foldedMessages, foldMessages, type MessageFold } from "./internal/history.js"

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

interface Memo {
  readonly historyFromSeq: number
  readonly firstSeq: number
  /** The tapeSeq of the last event folded. */
  lastSeq: number
  readonly fold: MessageFold
}

/**
 * The default stage with its own memo: the conversation folded so far per session (the least
 * recently used dropped past `capacity`), so each model call folds only the events committed since
 * the session's previous call instead of its whole history. Committed events never change, so a
 * memo is extended, never invalidated; a history that does not continue it (a reset's new
 * `historyFromSeq`, another first event, fewer events) starts a new one. Branched sessions (whose
 * history joins two tapes) are folded whole each time.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeFromHistory = (capacity = 128): Service => {
  const memos = new Map<SessionId, Memo>()
  const conversation = (session: Session, history: ReadonlyArray<TapeEvent>) => {
    const first = history[0]
    const last = history.at(-1)
    if (session.parentId !== null || first === undefined || last === undefined) {
      return foldMessages(emptyFold(), history)
    }
    let memo = memos.get(session.id)
    memos.delete(session.id)
    // Where the memo stops in this history: after the last event it folded (streamed deltas, which
    // the fold ignores, may be missing from a reloaded history).
    let from = history.length
    while (from > 0 && history[from - 1]!.tapeSeq > (memo?.lastSeq ?? Number.POSITIVE_INFINITY)) from--
    if (
      memo === undefined ||
      memo.historyFromSeq !== session.historyFromSeq ||
      memo.firstSeq !== first.tapeSeq ||
      last.tapeSeq < memo.lastSeq
    ) {
      memo = { historyFromSeq: session.historyFromSeq, firstSeq: first.tapeSeq, lastSeq: 0, fold: emptyFold() }
      from = 0
    }
    for (let i = from; i < history.length; i++) foldMessages(memo.fold, [history[i]!])
    memo.lastSeq = last.tapeSeq
    memos.set(session.id, memo)
    while (memos.size > capacity) memos.delete(memos.keys().next().value!)
    return memo.fold
  }
  return {
    assemble: (input) =>
      Effect.sync(() => {
        const fold = conversation(input.session, input.history)
        const request: ModelRequest = {
          instructions: input.instructions,
          messages: foldedMessages(fold),
          tools: input.tools
        }
        // The fold keeps its messages' characters as it grows: no walk over them per call.
        return { request, estimatedTokens: estimateTokensWith(request, foldedChars(fold)) }
      })
  }
}

/** The default stage: the conversation as the tape tells it. @since 0.1.0 @category Constructors */
export const fromHistory: Service = {
  assemble: (input) =>
    Effect.sync(() => {
      const fold = foldMessages(emptyFold(), input.history)
      const request: ModelRequest = {
        instructions: input.instructions,
        messages: foldedMessages(fold),
        tools: input.tools
      }
      return { request, estimatedTokens: estimateTokensWith(request, foldedChars(fold)) }
    })
}

/** The default stage, with a memo of each recent session's conversation (`makeFromHistory`). @since 0.1.0 @category Layers */
export const layer: Layer.Layer<PromptAssembler> = Layer.sync(PromptAssembler, () => makeFromHistory())

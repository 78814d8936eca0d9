/**
 * `LiveTape`: how stages that run inside a run (the prompt assembler and its decorators) append
 * events so that live subscribers see them as they happen. Until the Gateway binds its tape, appends
 * go straight to the journal (stored, seen on replay); once bound, they go through the Gateway's tape
 * (stored, then published to the session's live streams).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import { Journal, type Service as JournalService } from "./Journal.js"

/** @since 0.1.0 @category Models */
export interface Service {
  readonly append: JournalService["append"]
  /** Route appends through `append` from now on (the Gateway calls this with its tape's). */
  readonly bind: (append: JournalService["append"]) => void
}

/** @since 0.1.0 @category Tags */
export class LiveTape extends Context.Tag("@palyra/core/LiveTape")<LiveTape, Service>() {}

/** A live tape over a journal, unbound. @since 0.1.0 @category Constructors */
export const make = (journal: JournalService): Service => {
  let current: JournalService["append"] = journal.append
  return {
    append: (sessionId, events, effects) => Effect.suspend(() => current(sessionId, events, effects)),
    bind: (append) => {
      current = append
    }
  }
}

/** @since 0.1.0 @category Layers */
export const layer: Layer.Layer<LiveTape, never, Journal> = Layer.effect(LiveTape, Effect.map(Journal, make))

/**
 * The `Compactor`: compaction of a session's prompt history, with a checkpoint per compaction, and
 * time travel back to a checkpoint. `ContextEngine` implements it; the Gateway exposes it (after its
 * `Caller` check) to transports and the CLI.
 *
 * - `compact(sessionId, { preview })` summarises the older part of the prompt (`session_window_v1`),
 *   keeping the last turns, pinned notes and open work verbatim, and appends `CompactionApplied`
 *   with a new checkpoint — or, with `preview`, only says what it would do.
 * - `restore(sessionId, checkpointId)` puts the prompt back exactly as it was before that
 *   checkpoint's compaction, and appends `CheckpointRestored`. Nothing is deleted or rewritten.
 * - `listCheckpoints(sessionId)` lists a session's checkpoints, oldest first.
 *
 * @since 0.1.0
 */
import { Context, type Effect, Schema } from "effect"
import type { Conflict, InvalidArgument, JournalError, NotFound, PayloadTooLarge } from "../domain/Errors.js"
import type { RunId, SessionId } from "../domain/Ids.js"
import type { Session } from "../domain/Records.js"
import type { TapeEventOf } from "../domain/TapeEvent.js"

/** The one strategy of this slice. @since 0.1.0 @category Models */
export const STRATEGY = "session_window_v1"

/**
 * The first line of the instructions of every summary request, so a scripted model (or a proxy) can
 * tell a compaction call from a conversation turn.
 *
 * @since 0.1.0
 * @category Models
 */
export const COMPACTION_MARKER = "[palyra:compaction session_window_v1]"

/** A checkpoint id: a ULID (parsed at the edge; anything else is `InvalidArgument`). @since 0.1.0 @category Ids */
export const CheckpointId = Schema.String.pipe(
  Schema.pattern(/^[0-9A-HJKMNP-TV-Z]{26}$/, {
    message: () => "CheckpointId must be a 26-character ULID (Crockford base32)"
  }),
  Schema.brand("CheckpointId")
)
/** @since 0.1.0 @category Ids */
export type CheckpointId = typeof CheckpointId.Type

/** A note kept verbatim in every later summary. @since 0.1.0 @category Models */
export const PinnedNote = Schema.Struct({ seq: Schema.Number, author: Schema.String, text: Schema.String })
/** @since 0.1.0 @category Models */
export type PinnedNote = typeof PinnedNote.Type

/**
 * What a checkpoint stores (the journal's `state` column): enough to put the prompt back as it was.
 * `restoredSeq` is the tape head the pre-compaction prompt was built from.
 *
 * @since 0.1.0
 * @category Models
 */
export const CheckpointState = Schema.Struct({
  version: Schema.Literal(1),
  strategy: Schema.String,
  summarizer: Schema.Literal("model", "extractive"),
  historyFromSeq: Schema.Number,
  resetGeneration: Schema.Number,
  restoredSeq: Schema.Number,
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number,
  pinned: Schema.Array(PinnedNote)
})
/** @since 0.1.0 @category Models */
export type CheckpointState = typeof CheckpointState.Type

/** A checkpoint as callers see it. @since 0.1.0 @category Models */
export interface CheckpointInfo extends Omit<CheckpointState, "version" | "pinned"> {
  readonly id: string
  readonly sessionId: SessionId
  readonly fromSeq: number
  readonly toSeq: number
  readonly summary: string
  readonly createdAt: number
  readonly pinnedNotes: number
}

/** @since 0.1.0 @category Models */
export interface CompactOptions {
  /** Compute the summary and the token counts, but append nothing. */
  readonly preview?: boolean | undefined
  /** The run the compaction happens in (`null`: a session-level compaction). */
  readonly runId?: RunId | null | undefined
}

/** The outcome of a compaction (or of its preview). @since 0.1.0 @category Models */
export interface Compaction {
  readonly applied: boolean
  readonly sessionId: SessionId
  /** The tape range newly covered (`fromSeq > toSeq` when only inherited history was covered). */
  readonly fromSeq: number
  readonly toSeq: number
  readonly summary: string
  readonly strategy: string
  readonly summarizer: "model" | "extractive"
  /** Why the model's summary was refused (the extractive summary was used instead). */
  readonly rejected: string | undefined
  readonly tokensBefore: number
  readonly tokensAfter: number
  /** The checkpoint and the event (absent for previews). */
  readonly checkpointId: string | undefined
  readonly event: TapeEventOf<"CompactionApplied"> | undefined
}

/** @since 0.1.0 @category Models */
export interface Restored {
  readonly event: TapeEventOf<"CheckpointRestored">
  readonly session: Session
}

/** @since 0.1.0 @category Models */
export type CompactorError = JournalError | NotFound | Conflict | InvalidArgument | PayloadTooLarge

/** @since 0.1.0 @category Models */
export interface Service {
  /**
   * Compact now (cooldown and thresholds do not apply). Fails with `Conflict` while an approval is
   * pending or when nothing can be covered yet.
   */
  readonly compact: (sessionId: SessionId, options?: CompactOptions) => Effect.Effect<Compaction, CompactorError>
  /**
   * Put the session's prompt back as it was before the checkpoint's compaction. Fails with `Conflict`
   * while the session has a run that has not ended, `NotFound` for a checkpoint of another session.
   */
  readonly restore: (
    sessionId: SessionId,
    checkpointId: string,
    options?: { readonly by?: string | undefined }
  ) => Effect.Effect<Restored, CompactorError>
  readonly listCheckpoints: (sessionId: SessionId) => Effect.Effect<ReadonlyArray<CheckpointInfo>, CompactorError>
}

/** @since 0.1.0 @category Tags */
export class Compactor extends Context.Tag("@palyra/core/Compactor")<Compactor, Service>() {}

/**
 * The `Journal` port: Palyra's source of truth. Every tape event is appended here before anyone
 * sees it; runs, sessions and approvals are stored beside the tape. `@palyra/journal` implements it on
 * SQLite; `MemoryJournal` is a real in-memory implementation for fast tests and embedding.
 *
 * Appends are atomic with their side effects (`AppendEffects`): a run's state change and the
 * `RunStateChanged` event that records it commit together or not at all.
 *
 * @since 0.1.0
 */
import { Context, Effect, type Exit, Option } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import type { Conflict, JournalError, PayloadTooLarge } from "../domain/Errors.js"
import { NotFound } from "../domain/Errors.js"
import type { ApprovalId, RunId, SessionId } from "../domain/Ids.js"
import type {
  ApprovalFilter,
  ApprovalRecord,
  ApprovalStatus,
  Run,
  RunFilter,
  Session,
  SessionFilter
} from "../domain/Records.js"
import type { RunState } from "../domain/RunState.js"
import type { ApprovalScope, NewTapeEvent, TapeEvent } from "../domain/TapeEvent.js"

/** Changes committed in the same transaction as an append. @since 0.1.0 @category Models */
export interface AppendEffects {
  /**
   * Create the append's session first, in the same transaction (its id must be the append's):
   * fails with `Conflict` (and appends nothing) if the id exists or the principal's key is taken.
   */
  readonly createSession?: Session | undefined
  /** Insert this run (its first events are usually `RunAccepted` + `UserMessage`). */
  readonly createRun?: Run | undefined
  /**
   * Compare-and-set a run's state: fails with `Conflict` (and appends nothing) unless it is `from`.
   * A transition to a terminal state also records the run's `endSeq`: the append's last `tapeSeq`.
   */
  readonly runTransition?:
    | {
        readonly runId: RunId
        readonly from: RunState
        readonly to: RunState
        readonly error?: { readonly code: string; readonly message: string } | undefined
      }
    | undefined
  /** Insert this approval record. */
  readonly createApproval?: ApprovalRecord | undefined
  /** Add to the session's token counter. */
  readonly addTokens?: number | undefined
  /** Store this checkpoint (its session must be the append's); fails with `Conflict` if its id exists. */
  readonly createCheckpoint?: Checkpoint | undefined
}

/**
 * A compaction checkpoint: what the context engine needs to put a session's prompt back as it was
 * before a compaction. `state` is the engine's own JSON (journals store it as given, redacted).
 *
 * @since 0.1.0
 * @category Models
 */
export interface Checkpoint {
  readonly id: string
  readonly sessionId: SessionId
  readonly fromSeq: number
  readonly toSeq: number
  readonly summary: string
  readonly state: unknown
  readonly createdAt: number
}

/** A compare-and-set resolution of a pending approval. @since 0.1.0 @category Models */
export interface ApprovalResolution {
  readonly status: Exclude<ApprovalStatus, "pending" | "revoked">
  readonly scope: ApprovalScope
  readonly resolver: string
  readonly reason: string
  readonly resolvedAt: number
  /** For `session`/`always` grants. */
  readonly grantExpiresAt?: number | null | undefined
  readonly grantMaxUses?: number | null | undefined
}

/** @since 0.1.0 @category Models */
export interface ReadTapeOptions {
  /** Return events with `tapeSeq > afterSeq`. */
  readonly afterSeq: number
  /** At most this many events (default: all). */
  readonly limit?: number | undefined
  /** Only events of this run. */
  readonly runId?: RunId | undefined
  /** Only events with `tapeSeq <= uptoSeq`. */
  readonly uptoSeq?: number | undefined
}

/**
 * Why a journal failed verification. The tape chain: a row was `edited`, `inserted`, `deleted`,
 * `reordered`, or the tail `truncated`. Stored records (sessions, runs, approvals) beside the tape:
 * a row no longer matches its last recorded version (`row_edited`), a row was removed
 * (`row_deleted`), or a row appeared that was never written by the journal (`row_inserted`).
 *
 * @since 0.1.0
 * @category Models
 */
export type VerifyReason =
  | "edited"
  | "inserted"
  | "deleted"
  | "reordered"
  | "truncated"
  | "row_edited"
  | "row_deleted"
  | "row_inserted"

/** Result of recomputing the hash chain. @since 0.1.0 @category Models */
export type VerifyResult =
  | { readonly ok: true; readonly checked: number }
  | {
      readonly ok: false
      /** Tape rows found intact before the failure. */
      readonly checked: number
      readonly sessionId: string
      readonly tapeSeq: number
      readonly reason: VerifyReason
      readonly detail: string
      /** For `row_*` reasons: the table, the row id and the columns that differ (if known). */
      readonly row?:
        | { readonly table: string; readonly id: string; readonly columns: ReadonlyArray<string> }
        | undefined
    }

/** @since 0.1.0 @category Models */
export interface Service {
  /** Append events to one session's tape; assigns gap-free `tapeSeq`s; atomic with `effects`. */
  readonly append: (
    sessionId: SessionId,
    events: NonEmptyReadonlyArray<NewTapeEvent>,
    effects?: AppendEffects
  ) => Effect.Effect<ReadonlyArray<TapeEvent>, JournalError | PayloadTooLarge | NotFound | Conflict>
  readonly readTape: (
    sessionId: SessionId,
    options: ReadTapeOptions
  ) => Effect.Effect<ReadonlyArray<TapeEvent>, JournalError>
  /** The highest `tapeSeq` of the session, 0 when empty. */
  readonly headSeq: (sessionId: SessionId) => Effect.Effect<number, JournalError>

  readonly createSession: (session: Session) => Effect.Effect<void, JournalError | Conflict>
  readonly getSession: (id: SessionId) => Effect.Effect<Option.Option<Session>, JournalError>
  readonly findSessionByKey: (principal: string, key: string) => Effect.Effect<Option.Option<Session>, JournalError>
  readonly updateSession: (session: Session) => Effect.Effect<void, JournalError | NotFound>
  readonly listSessions: (filter: SessionFilter) => Effect.Effect<ReadonlyArray<Session>, JournalError>

  readonly getRun: (id: RunId) => Effect.Effect<Option.Option<Run>, JournalError>
  readonly listRuns: (filter: RunFilter) => Effect.Effect<ReadonlyArray<Run>, JournalError>

  /** Compare-and-set from `pending`: exactly one concurrent resolution wins, the rest get `Conflict`. */
  readonly resolveApproval: (
    id: ApprovalId,
    resolution: ApprovalResolution
  ) => Effect.Effect<ApprovalRecord, JournalError | NotFound | Conflict>
  readonly getApproval: (id: ApprovalId) => Effect.Effect<Option.Option<ApprovalRecord>, JournalError>
  /**
   * Count one use of an active grant (compare-and-set: fails with `Conflict` when the grant was
   * revoked, expired at `now` or used up meanwhile).
   */
  readonly useGrant: (id: ApprovalId, now: number) => Effect.Effect<ApprovalRecord, JournalError | NotFound | Conflict>
  /** Revoke a standing grant (status `approved` → `revoked`). */
  readonly revokeGrant: (
    id: ApprovalId,
    by: string,
    at: number
  ) => Effect.Effect<ApprovalRecord, JournalError | NotFound | Conflict>
  readonly listApprovals: (filter: ApprovalFilter) => Effect.Effect<ReadonlyArray<ApprovalRecord>, JournalError>

  /** A session's checkpoints, oldest first. */
  readonly listCheckpoints: (sessionId: SessionId) => Effect.Effect<ReadonlyArray<Checkpoint>, JournalError>
  readonly getCheckpoint: (id: string) => Effect.Effect<Option.Option<Checkpoint>, JournalError>

  /**
   * Recompute the tamper-evidence chain over the whole journal (and, where the journal records
   * them, check the stored records against their recorded versions).
   */
  readonly verify: Effect.Effect<VerifyResult, JournalError>
}

/** @since 0.1.0 @category Tags */
export class Journal extends Context.Tag("@palyra/core/Journal")<Journal, Service>() {}

/** Read a session or fail with `NotFound`. @since 0.1.0 @category Accessors */
export const requireSession = (journal: Service, id: SessionId): Effect.Effect<Session, JournalError | NotFound> =>
  journal.getSession(id).pipe(
    Effect.flatMap(
      Option.match({
        onNone: () => Effect.fail(new NotFound({ entity: "session", id })),
        onSome: Effect.succeed
      })
    )
  )

/**
 * A run's own events on its session's tape, in order: those in `[startSeq, endSeq]` when the run has
 * ended (the read stays within the run's range however long its session grew after it), from
 * `startSeq` on while it runs.
 *
 * @since 0.1.0
 * @category Accessors
 */
export const readRunTape = (journal: Service, run: Run): Effect.Effect<ReadonlyArray<TapeEvent>, JournalError> =>
  journal.readTape(
    run.sessionId,
    run.endSeq === undefined
      ? { afterSeq: Math.max(0, run.startSeq - 1), runId: run.id }
      : { afterSeq: Math.max(0, run.startSeq - 1), uptoSeq: run.endSeq, runId: run.id }
  )

/** Read a run or fail with `NotFound`. @since 0.1.0 @category Accessors */
export const requireRun = (journal: Service, id: RunId): Effect.Effect<Run, JournalError | NotFound> =>
  journal
    .getRun(id)
    .pipe(
      Effect.flatMap(
        Option.match({ onNone: () => Effect.fail(new NotFound({ entity: "run", id })), onSome: Effect.succeed })
      )
    )

/** Why an append fails. @since 0.1.0 @category Models */
export type AppendError = JournalError | PayloadTooLarge | NotFound | Conflict

/**
 * An append as a plain call: the same write as `append`, with its outcome passed to `done` (once,
 * possibly before `appendNow` returns) instead of an Effect to run. The tape calls it on its hot
 * path, where `append`'s own suspend/resume per append was a measurable share of the cost.
 *
 * @since 0.1.0
 * @category Models
 */
export type AppendNow = (
  sessionId: SessionId,
  events: NonEmptyReadonlyArray<NewTapeEvent>,
  effects: AppendEffects | undefined,
  done: (exit: Exit.Exit<ReadonlyArray<TapeEvent>, AppendError>) => void
) => void

const appendNowKey: unique symbol = Symbol.for("@palyra/core/Journal/appendNow")

/**
 * Attach the plain form of `append` to `append` itself. The two travel together: a decorator that
 * replaces a journal's `append` (timing, probes) drops the plain form with it, so callers that ask
 * for it (`appendNowOf`) fall back to the decorated `append` and nothing is bypassed.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const withAppendNow = (append: Service["append"], appendNow: AppendNow): Service["append"] => {
  // A new function: the one passed in (maybe another journal's) is left as it was.
  const marked: Service["append"] = (sessionId, events, effects) => append(sessionId, events, effects)
  return Object.assign(marked, { [appendNowKey]: appendNow })
}

/**
 * The plain form of this journal's `append`, when its implementation provides one
 * (`withAppendNow`): it performs exactly the write `append` performs.
 *
 * @since 0.1.0
 * @category Accessors
 */
export const appendNowOf = (journal: Service): AppendNow | undefined =>
  (journal.append as Service["append"] & { readonly [appendNowKey]?: AppendNow })[appendNowKey]

import { Effect, Either, FiberRef } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import type { Conflict, InvalidTransition, JournalError, NotFound, PayloadTooLarge } from "../../domain/Errors.js"
import type { Run, Session } from "../../domain/Records.js"
import { transition as nextState } from "../../domain/RunState.js"
import type { Attachment, NewTapeEvent, TapeEvent } from "../../domain/TapeEvent.js"
import * as Metrics from "../Metrics.js"
import type { Tape } from "./tape.js"

type Written = Effect.Effect<
  ReadonlyArray<TapeEvent>,
  JournalError | PayloadTooLarge | NotFound | Conflict | InvalidTransition
>

/**
 * A run that can start at once (nothing active or queued on its session), admitted and started in
 * one append — one journal commit instead of two. The tape is exactly what admission then the
 * loop's `Start` would write: `RunAccepted`, `RunStateChanged` Pending → Accepted, `UserMessage`,
 * `RunStateChanged` Accepted → InProgress. The run is inserted `Pending` and compare-and-set to
 * `InProgress` in the same transaction, so a crash leaves either nothing or a started run (which
 * recovery resumes from its tape, or marks interrupted, like any run in progress).
 * @internal
 */
export const recordAdmittedStart = (
  tape: Tape,
  created: Run,
  accepted: NewTapeEvent & { readonly _tag: "RunAccepted" },
  attachments: { readonly attachments?: ReadonlyArray<Attachment> },
  /** A new session, created in the same commit (a taken key fails it with `Conflict`, nothing stored). */
  createSession?: Session | undefined
): Written =>
  Effect.clockWith((clock): Written => {
    const acceptedState = nextState("Pending", "Accept")
    if (Either.isLeft(acceptedState)) return Effect.fail(acceptedState.left)
    const started = nextState(acceptedState.right, "Start")
    if (Either.isLeft(started)) return Effect.fail(started.left)
    const ref = { sessionId: created.sessionId, runId: created.id }
    const at = clock.unsafeCurrentTimeMillis()
    const events: NonEmptyReadonlyArray<NewTapeEvent> = [
      accepted,
      { _tag: "RunStateChanged", ...ref, at, from: "Pending", to: acceptedState.right, reason: "admitted" },
      { _tag: "UserMessage", ...ref, at, text: created.input, ...attachments },
      { _tag: "RunStateChanged", ...ref, at, from: acceptedState.right, to: started.right, reason: "run started" }
    ]
    return Effect.flatMap(
      tape.append(ref.sessionId, events, {
        createRun: created,
        createSession,
        runTransition: { runId: created.id, from: "Pending", to: started.right, error: undefined }
      }),
      // Both counts in one step with the fiber's metric labels (what two `recordRunTransition`s
      // read, in ~8 steps).
      (stored) =>
        Effect.withFiberRuntime<ReadonlyArray<TapeEvent>>((fiber) => {
          const labels = fiber.getFiberRef(FiberRef.currentMetricLabels)
          Metrics.unsafeRecord.runTransition(acceptedState.right, labels)
          Metrics.unsafeRecord.runTransition(started.right, labels)
          return Effect.succeed(stored)
        })
    )
  })

import { Clock, Effect } from "effect"
import type { JournalError } from "../../domain/Errors.js"
import { type Service as JournalService, readRunTape } from "../../ports/Journal.js"
import * as RunView from "../RunView.js"
import type { Scheduler } from "./scheduler.js"
import type { Tape } from "./tape.js"
import { closeOpenWork, recordTransition } from "./transition.js"

/**
 * Start-up: pick up what the previous process left. Queued runs and runs waiting for approval
 * resume (in their session's order); runs that were in progress are resumed from their tape or
 * marked `Failed` with code `interrupted`, as configured. A run's start commits with its admission,
 * and its first model request is written with the call's first output: a run whose tape ends at its
 * start may have called the model already, so under "fail" it is failed like any run in progress.
 * @internal
 */
export const recover = (
  journal: JournalService,
  tape: Tape,
  scheduler: Scheduler,
  onInterrupted: "fail" | "resume"
): Effect.Effect<void, JournalError> =>
  Effect.gen(function* () {
    const leftOver = yield* journal.listRuns({ states: ["Accepted", "InProgress", "WaitingForApproval"] })
    const ordered = [...leftOver].sort((a, b) => a.sessionId.localeCompare(b.sessionId) || a.startSeq - b.startSeq)
    for (const run of ordered) {
      if (run.state !== "InProgress" || onInterrupted === "resume") {
        yield* scheduler.enqueue(run.sessionId, run.id)
        continue
      }
      const message = "the process stopped while this run was in progress"
      const ref = { sessionId: run.sessionId, runId: run.id }
      yield* Effect.gen(function* () {
        const view = RunView.fold(run.id, yield* readRunTape(journal, run))
        const closing = yield* closeOpenWork(journal, ref, view, "interrupted", message)
        const at = yield* Clock.currentTimeMillis
        yield* recordTransition(tape, ref, "InProgress", "Fail", `interrupted: ${message}`, {
          extra: [...closing, { _tag: "RunError", ...ref, at, code: "interrupted", message }],
          error: { code: "interrupted", message }
        })
      }).pipe(Effect.catchAll((e) => Effect.logError("could not mark interrupted run", e)))
    }
  })

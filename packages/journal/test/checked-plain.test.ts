/**
 * `checkedJournal` (core testing) keeps the journal's plain append: over `SqliteJournal` the tape
 * takes the same `appendNow` path as the daemon's (`Journal.appendNowOf` answers it), and the plain
 * form still refuses an illegal run-state change (a defect, nothing handed to the writer), as the
 * Effect form does. A real SQLite file.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Ids, Journal, type TapeEvent } from "@palyra/core"
import { checkedJournal } from "@palyra/core/testing"
import { Cause, Effect, Exit } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-checked-plain-"))

describe("checkedJournal over SqliteJournal", () => {
  it.scoped("keeps the plain append, which refuses an illegal transition", () =>
    Effect.gen(function* () {
      const journal = yield* Journal.Journal
      const now = Journal.appendNowOf(journal)
      assert.isDefined(now)
      const sessionId = Ids.SessionId.make("01J0000000000000000000000S")
      const illegal = {
        _tag: "RunStateChanged",
        sessionId,
        runId: Ids.RunId.make("01J0000000000000000000000R"),
        at: 1,
        from: "Done",
        to: "InProgress",
        reason: "test"
      } as unknown as TapeEvent.NewTapeEvent
      const exit = yield* Effect.async<Exit.Exit<ReadonlyArray<TapeEvent.TapeEvent>, Journal.AppendError>>((resume) =>
        now!(sessionId, [illegal], undefined, (e) => resume(Effect.succeed(e)))
      )
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.strictEqual(yield* journal.headSeq(sessionId), 0)
    }).pipe(Effect.provide(checkedJournal(SqliteJournal.layer({ filename: join(dir, "checked.db") }))))
  )
})

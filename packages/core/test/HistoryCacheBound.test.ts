/**
 * The history cache keeps a session's last ended run's streamed deltas (so an incrementally folding
 * prompt stage needs no read), but only those of the run's last model call: the ones before it were
 * folded when that call's prompt was built. A long tool loop's deltas are not held per session.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { RunId, SessionId } from "../src/domain/Ids.js"
import { makeSession } from "../src/domain/Records.js"
import type { NewTapeEvent } from "../src/domain/TapeEvent.js"
import { MemoryJournal } from "../src/index.js"
import { makeHistoryCache } from "../src/kernel/internal/historyCache.js"
import { loadHistory } from "../src/kernel/internal/loop.js"

describe("the history cache's kept deltas", () => {
  it.effect("only the last model call's of a run of several", () =>
    Effect.gen(function* () {
      const journal = yield* MemoryJournal.make()
      const cache = makeHistoryCache(journal, (s) => loadHistory(journal, s))
      const session = makeSession({
        id: "01JSESSION0000000000000001" as SessionId,
        createdAt: 0,
        updatedAt: 0,
        principal: "alice"
      })
      yield* journal.createSession(session)
      const ref = { sessionId: session.id, runId: "01JRUN00000000000000000001" as RunId }
      const history = yield* cache.load(session)
      const loaded = history.length
      // Five model calls of a tool loop, each streaming 50 deltas and ending with its message.
      for (let turn = 0; turn < 5; turn++) {
        const events: Array<NewTapeEvent> = [
          { _tag: "ModelRequest", ...ref, at: 0, turn, model: "m", messages: 1 } as NewTapeEvent
        ]
        for (let d = 0; d < 50; d++) events.push({ _tag: "AssistantDelta", ...ref, at: 0, turn, text: `${turn}:${d} ` })
        events.push({
          _tag: "AssistantMessage",
          ...ref,
          at: 0,
          turn,
          text: "done",
          finishReason: "stop"
        } as NewTapeEvent)
        history.push(...(yield* journal.append(session.id, events as [NewTapeEvent, ...Array<NewTapeEvent>])))
      }
      cache.committed(session, history, loaded)
      const next = yield* cache.load(session)
      const deltas = next.flatMap((e) => (e._tag === "AssistantDelta" ? [e.text] : []))
      assert.strictEqual(deltas.length, 50)
      assert.strictEqual(deltas[0], "4:0 ")
      // Everything else of the run is held, in order, with no gap in what the cache answers.
      assert.strictEqual(next.filter((e) => e._tag === "AssistantMessage").length, 5)
      assert.strictEqual(next.at(-1)?.tapeSeq, history.at(-1)?.tapeSeq)
    })
  )
})

import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as MemoryJournal from "../src/adapters/MemoryJournal.js"
import { makeSessionId } from "../src/domain/Ids.js"
import { makeSession } from "../src/domain/Records.js"
import type { NewTapeEvent } from "../src/domain/TapeEvent.js"

// The memory journal settles most events' size with a bound (no JSON built) and encodes only those
// the bound cannot clear: an event is refused exactly when its JSON is over the limit in UTF-8 bytes.
describe("MemoryJournal event size", () => {
  const limit = 400
  // One unit of each UTF-8 width and of each JSON escape (a quote, a backslash, a newline: 2 bytes;
  // a control character: `\u0001`, 6 bytes).
  const units = ["a", "é", "漢", "😀", '"', "\\", "\n", "\u0001", "a\u0001漢"]

  it.effect("refuses an event exactly when its encoded size is over the limit", () =>
    Effect.gen(function* () {
      const j = yield* MemoryJournal.make({ maxEventBytes: limit })
      const session = makeSession({ id: yield* makeSessionId, principal: "alice", key: null })
      yield* j.createSession(session)
      let checked = 0
      for (const unit of units) {
        // Grow the text one unit at a time until it is past the limit: both sides of it are tried.
        for (let n = 0; ; n++) {
          const event: NewTapeEvent = {
            _tag: "SessionNote",
            sessionId: session.id,
            runId: null,
            at: 1,
            author: "test",
            text: unit.repeat(n)
          }
          const head = yield* j.headSeq(session.id)
          const size = Buffer.byteLength(JSON.stringify({ ...event, tapeSeq: head + 1 }))
          const outcome = yield* Effect.either(j.append(session.id, [event]))
          assert.strictEqual(outcome._tag === "Right", size <= limit, `${size} bytes: ${outcome._tag}`)
          if (outcome._tag === "Left") assert.strictEqual(outcome.left._tag, "PayloadTooLarge")
          checked++
          if (size > limit + 20) break
        }
      }
      assert.isAbove(checked, 200)
    })
  )

  it.effect("counts `undefined` items and holes of arrays as the `null` JSON writes for them", () =>
    Effect.gen(function* () {
      // A limit far above the event's other fields' bound, so the items decide it.
      const big = 4000
      const j = yield* MemoryJournal.make({ maxEventBytes: big })
      const session = makeSession({ id: yield* makeSessionId, principal: "alice", key: null })
      yield* j.createSession(session)
      for (const items of [(n: number) => Array.from({ length: n }, () => undefined), (n: number) => new Array(n)]) {
        for (const n of [100, 700, 780, 800, 1000]) {
          const event = {
            _tag: "SessionNote",
            sessionId: session.id,
            runId: null,
            at: 1,
            author: "test",
            text: "",
            extra: items(n)
          } as unknown as NewTapeEvent
          const head = yield* j.headSeq(session.id)
          const size = Buffer.byteLength(JSON.stringify({ ...event, tapeSeq: head + 1 }))
          const outcome = yield* Effect.either(j.append(session.id, [event]))
          assert.strictEqual(outcome._tag === "Right", size <= big, `${n} items, ${size} bytes: ${outcome._tag}`)
        }
      }
    })
  )
})

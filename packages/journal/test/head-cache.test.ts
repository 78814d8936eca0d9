/**
 * The session heads both threads keep in memory (the writer's, to number new events; the main
 * thread's, for `headSeq`) are bounded at 4,096 sessions and drop the oldest-inserted entry first,
 * even one in use: a session written to all along must still get the next seq after its head was
 * dropped (read again from the tape's index), with no gap or duplicate, on both writers.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Records, type TapeEvent } from "@palyra/core"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-head-cache-"))
const sid = (i: number) => `01KH${String(i).padStart(22, "0")}` as TapeEvent.TapeEvent["sessionId"]
const message = (session: TapeEvent.TapeEvent["sessionId"], i: number): TapeEvent.NewTapeEvent => ({
  _tag: "UserMessage",
  sessionId: session,
  runId: null,
  at: 1_700_000_000_000 + i,
  text: `message ${i}`
})

describe("the session head caches", () => {
  for (const writer of ["worker", "inline"] as const) {
    it.effect(
      `a busy session whose cached head was dropped (4,100 newer sessions) continues gap-free (${writer})`,
      () =>
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename: join(dir, `${writer}.db`), writer })
          const busy = sid(0)
          yield* j.createSession(Records.makeSession({ id: busy, principal: "p" }))
          let n = 0
          const seqs: Array<number> = []
          const appendBusy = Effect.map(j.append(busy, [message(busy, n++)]), (events) => {
            seqs.push(events[0]!.tapeSeq)
          })
          yield* appendBusy
          // Newer sessions, each created and written in its append; the busy one is written between them.
          for (let block = 0; block < 5; block++) {
            yield* Effect.forEach(
              Array.from({ length: 820 }, (_, i) => sid(1 + block * 820 + i)),
              (id) =>
                j.append(id, [message(id, 0)], {
                  createSession: Records.makeSession({ id, principal: "p" })
                }),
              { concurrency: 64, discard: true }
            )
            yield* appendBusy
          }
          assert.deepStrictEqual(
            seqs,
            Array.from({ length: 6 }, (_, i) => i + 1)
          )
          assert.strictEqual(yield* j.headSeq(busy), 6)
          assert.strictEqual(yield* j.headSeq(sid(1)), 1)
          assert.strictEqual((yield* j.verify).ok, true)
        }).pipe(Effect.scoped),
      60_000
    )
  }
})

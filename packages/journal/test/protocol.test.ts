import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Canonical, Errors, Records, type TapeEvent } from "@palyra/core"
import { Effect, Either } from "effect"
import { SqliteJournal } from "../src/index.js"
import { rowHash } from "../src/internal/chain.js"
import { encodeAnswer, type OpResult } from "../src/internal/protocol.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-protocol-"))
const sid = (i: number) => `01KA${String(i).padStart(22, "0")}` as TapeEvent.TapeEvent["sessionId"]
const message = (session: TapeEvent.TapeEvent["sessionId"], i: number): TapeEvent.NewTapeEvent => ({
  _tag: "UserMessage",
  sessionId: session,
  runId: null,
  at: 1_700_000_000_000 + i,
  text: `message ${i}`
})

describe("the writer thread's answers", () => {
  it("a batch of committed appends is answered as a transferable Float64Array of first seqs", () => {
    const { reply, transfer } = encodeAnswer(7, 1.5, [
      { ok: true, seq: 1 },
      { ok: true, seq: 4 },
      { ok: true, seq: 2 ** 40 }
    ])
    expect(reply.results).toBeUndefined()
    expect(reply.seqs).toBeInstanceOf(Float64Array)
    expect([...reply.seqs!]).toEqual([1, 4, 2 ** 40])
    expect(transfer).toEqual([reply.seqs!.buffer])
    expect(reply).toMatchObject({ id: 7, ms: 1.5 })
  })

  it("a batch with a failure, a record write or a write without a seq is answered op by op", () => {
    const batches: Array<Array<OpResult>> = [
      [
        { ok: true, seq: 1 },
        { ok: false, tag: "NotFound", message: "session x not found", entity: "session", id: "x" }
      ],
      [
        { ok: true, seq: 1 },
        { ok: true, changes: 1, row: { id: "a" } }
      ],
      [{ ok: true }]
    ]
    for (const results of batches) {
      const { reply, transfer } = encodeAnswer(1, 0, results)
      expect(reply.seqs).toBeUndefined()
      expect(reply.results).toEqual(results)
      expect(transfer).toEqual([])
    }
  })

  it("the row hash is SHA-256 over the same JSON as before (files written earlier still verify)", () => {
    const args = [
      "ab".repeat(32),
      "01KA0000000000000000000001",
      3,
      null,
      "UserMessage",
      1_700_000_000_000,
      '{"t":"é\\n"}'
    ] as const
    expect(rowHash(...args)).toBe(Canonical.sha256(JSON.stringify(args)))
  })

  it.effect("through the worker: a batch mixing a failing append and good ones answers each, then verifies", () =>
    Effect.gen(function* () {
      const j = yield* SqliteJournal.make({ filename: join(dir, "mixed.db"), writer: "worker" })
      yield* j.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
      // Submitted in one event-loop turn, so they cross together (one batch, or two when one is in flight).
      const [a, missing, b] = yield* Effect.all(
        [
          j.append(sid(0), [message(sid(0), 0), message(sid(0), 1)]),
          Effect.either(j.append(sid(9), [message(sid(9), 0)])),
          j.append(sid(0), [message(sid(0), 2)])
        ],
        { concurrency: "unbounded" }
      )
      expect(a.map((e) => e.tapeSeq)).toEqual([1, 2])
      expect(b.map((e) => e.tapeSeq)).toEqual([3])
      expect(Either.isLeft(missing) && missing.left).toBeInstanceOf(Errors.NotFound)
      // Batches of appends that all commit are answered with seqs only: they are the stored ones.
      const more = yield* Effect.all(
        Array.from({ length: 5 }, (_, i) => j.append(sid(0), [message(sid(0), 10 + i)])),
        { concurrency: "unbounded" }
      )
      expect(more.map((events) => events[0]!.tapeSeq)).toEqual([4, 5, 6, 7, 8])
      expect(yield* j.headSeq(sid(0))).toBe(8)
      expect((yield* j.verify).ok).toBe(true)
    }).pipe(Effect.scoped)
  )
})

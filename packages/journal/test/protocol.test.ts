import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Canonical, Errors, Records } from "@palyra/core"
import { Effect, Either } from "effect"
import fc from "fast-check"
import { SqliteJournal } from "../src/index.js"
import { rowHash } from "../src/internal/chain.js"
import {
  type AppendOp,
  decodeBatch,
  encodeAnswer,
  encodeBatch,
  type Op,
  type OpResult
} from "../src/internal/protocol.js"
import { sessionIdOf, userMessage } from "./fixtures/tape.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-protocol-"))
const sid = (i: number) => sessionIdOf(i)
const message = userMessage

describe("the batch's two strings", () => {
  const wireEvent = fc.record({
    tag: fc.constantFrom("UserMessage", "ToolResult", "RunEnded"),
    runId: fc.option(fc.string({ maxLength: 30 }), { nil: null }),
    at: fc.integer({ min: 0, max: 2 ** 48 }),
    payload: fc.string({ unit: "binary", maxLength: 200 })
  })
  const effects = fc.oneof(
    fc.constant({}),
    fc.record({ addTokens: fc.integer({ min: 1, max: 100_000 }) }),
    fc.record({ addTokens: fc.constant(0) }),
    fc.record({
      createRun: fc.constant(["r1", "s", "p", "running", "{}", 1, null, null, 5, 5]),
      runTransition: fc.option(
        fc.record({
          runId: fc.constant("r1"),
          from: fc.constant("running"),
          to: fc.constant("succeeded"),
          errorCode: fc.constant(null),
          errorMessage: fc.constant(null),
          ends: fc.constant(true)
        }),
        { nil: undefined }
      )
    })
  )
  const append = fc.record({
    op: fc.constant("append" as const),
    sessionId: fc.string({ minLength: 1, maxLength: 30 }),
    events: fc.array(wireEvent, { minLength: 1, maxLength: 4 }),
    effects
  })
  const other = fc.record({
    op: fc.constantFrom("resolveApproval" as const, "useGrant" as const, "revokeGrant" as const),
    id: fc.string({ maxLength: 20 }),
    params: fc.array(fc.oneof(fc.string(), fc.integer(), fc.constant(null)), { maxLength: 5 })
  })
  // What the writer reads of an append: `addTokens` 0 or absent both add nothing.
  const tokens = (op: Op) => (op.op === "append" ? (op.effects.addTokens ?? 0) : undefined)
  const shape = (op: Op) => (op.op === "append" ? { ...op, effects: { ...op.effects, addTokens: tokens(op) } } : op)

  it("an effect it does not know crosses in the object form, not dropped as a plain append", () => {
    const op = {
      op: "append" as const,
      sessionId: "s",
      events: [{ tag: "UserMessage", runId: null, at: 1, payload: "{}" }],
      effects: { addTokens: 3, futureEffect: { id: "x" } } as AppendOp["effects"]
    }
    expect(decodeBatch(encodeBatch([op]))).toEqual([op])
  })

  it("decode(encode(ops)) is the ops: every session, event, payload (any UTF-16), effect and other op, in order", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof({ arbitrary: append, weight: 4 }, { arbitrary: other, weight: 1 }), { maxLength: 40 }),
        (ops) => {
          const wire = encodeBatch(ops as ReadonlyArray<Op>)
          expect(decodeBatch(wire).map(shape)).toEqual((ops as ReadonlyArray<Op>).map(shape))
        }
      ),
      { numRuns: 300 }
    )
  })

  it("an append with no effect but its tokens crosses as one flat array; one with effects as an object", () => {
    const plain: AppendOp = {
      op: "append",
      sessionId: "s1",
      effects: { addTokens: 12 },
      events: [
        { tag: "UserMessage", runId: null, at: 5, payload: '{"text":"hi"}' },
        { tag: "ToolResult", runId: "r1", at: 6, payload: '{"é":1}' }
      ]
    }
    const withRun: AppendOp = { ...plain, effects: { createRun: ["r1"] } }
    const { header, payloads } = encodeBatch([plain, withRun])
    const parsed = JSON.parse(header) as Array<unknown>
    expect(parsed[0]).toEqual(["s1", 12, "UserMessage", null, 5, 13, "ToolResult", "r1", 6, 7])
    expect(parsed[1]).toMatchObject({ op: "append", sessionId: "s1", effects: { createRun: ["r1"] } })
    expect(payloads).toBe('{"text":"hi"}{"é":1}{"text":"hi"}{"é":1}')
    expect(decodeBatch({ header, payloads })).toEqual([plain, withRun])
  })
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

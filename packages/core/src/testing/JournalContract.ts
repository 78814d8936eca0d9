/**
 * The Journal contract: one suite every `Journal` implementation runs against itself, so the
 * in-memory journal and the SQLite journal are interchangeable. Uses `@effect/vitest`.
 *
 * ```ts
 * import { journalContract } from "@palyra/core/journal-contract"
 * journalContract("sqlite", () => SqliteJournal.layer({ filename: ":memory:" }))
 * ```
 *
 * @since 0.1.0
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer, Option } from "effect"
import type { ApprovalId, RunId, SessionId, ToolCallId } from "../domain/Ids.js"
import { encodeUlid } from "../domain/Ids.js"
import { type ApprovalRecord, makeApproval, makeSession, type Run, type Session } from "../domain/Records.js"
import type { NewTapeEvent } from "../domain/TapeEvent.js"
import { Journal, readRunTape } from "../ports/Journal.js"

let counter = 0
const id = <T extends string>(): T => {
  counter++
  const random = Array.from({ length: 16 }, (_, i) => (counter >> (i % 4)) + i + Math.floor(Math.random() * 32))
  return encodeUlid(Date.now(), random) as T
}

const session = (principal = "alice", key: string | null = null): Session =>
  makeSession({ id: id<SessionId>(), principal, key })

const run = (s: Session, state: Run["state"] = "Pending"): Run => ({
  id: id<RunId>(),
  sessionId: s.id,
  principal: s.principal,
  state,
  input: "hello",
  startSeq: 1,
  error: null,
  createdAt: 1,
  updatedAt: 1
})

const note = (s: Session, text: string, runId: RunId | null = null): NewTapeEvent => ({
  _tag: "SessionNote",
  sessionId: s.id,
  runId,
  at: 1_700_000_000_000,
  author: "test",
  text
})

const approval = (s: Session, r: Run, expiresAt = Number.MAX_SAFE_INTEGER): ApprovalRecord =>
  makeApproval({
    id: id<ApprovalId>(),
    sessionId: s.id,
    runId: r.id,
    toolCallId: id<ToolCallId>(),
    principal: s.principal,
    tool: "fs.write",
    argsDigest: "d".repeat(64),
    risk: "sensitive",
    summary: "write a file",
    requestedAt: 1,
    expiresAt
  })

/**
 * Register the contract tests for a journal. `make` is called per test, so each test gets a fresh,
 * empty journal.
 *
 * @since 0.1.0
 * @category Testing
 */
export const journalContract = (name: string, make: () => Layer.Layer<Journal, unknown>) =>
  describe(`Journal contract: ${name}`, () => {
    const test = (title: string, body: Effect.Effect<void, unknown, Journal>) =>
      it.live(title, () => body.pipe(Effect.provide(make()), Effect.scoped) as Effect.Effect<void, unknown>)

    test(
      "appends assign gap-free, strictly increasing tapeSeq per session, in call order",
      Effect.gen(function* () {
        const j = yield* Journal
        const a = session()
        const b = session("bob")
        yield* j.createSession(a)
        yield* j.createSession(b)
        const first = yield* j.append(a.id, [note(a, "1"), note(a, "2")])
        yield* j.append(b.id, [note(b, "b1")])
        const second = yield* j.append(a.id, [note(a, "3")])
        assert.deepStrictEqual(
          [...first, ...second].map((e) => e.tapeSeq),
          [1, 2, 3]
        )
        assert.strictEqual(yield* j.headSeq(a.id), 3)
        assert.strictEqual(yield* j.headSeq(b.id), 1)
        const tape = yield* j.readTape(a.id, { afterSeq: 0 })
        assert.deepStrictEqual(
          tape.map((e) => (e._tag === "SessionNote" ? e.text : "")),
          ["1", "2", "3"]
        )
        assert.deepStrictEqual(tape, [...first, ...second])
      })
    )

    test(
      "an append can create its session: one commit, or nothing when the id or the key is taken",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session("alice", "k")
        const r = run(s)
        const stored = yield* j.append(s.id, [note(s, "first", r.id)], { createSession: s, createRun: r })
        assert.deepStrictEqual(
          stored.map((e) => e.tapeSeq),
          [1]
        )
        assert.strictEqual(Option.map(yield* j.getSession(s.id), (x) => x.key).pipe(Option.getOrNull), "k")
        assert.strictEqual(
          Option.map(yield* j.findSessionByKey("alice", "k"), (x) => x.id).pipe(Option.getOrNull),
          s.id
        )
        assert.strictEqual(Option.map(yield* j.getRun(r.id), (x) => x.state).pipe(Option.getOrNull), "Pending")
        assert.strictEqual(yield* j.headSeq(s.id), 1)
        // The same key again (another id), and the same id again: Conflict, nothing stored.
        const rival = session("alice", "k")
        const lost = run(rival)
        const byKey = yield* Effect.flip(
          j.append(rival.id, [note(rival, "rival", lost.id)], { createSession: rival, createRun: lost })
        )
        assert.strictEqual(byKey._tag, "Conflict")
        const byId = yield* Effect.flip(j.append(s.id, [note(s, "again")], { createSession: s }))
        assert.strictEqual(byId._tag, "Conflict")
        assert.isTrue(Option.isNone(yield* j.getSession(rival.id)))
        assert.isTrue(Option.isNone(yield* j.getRun(lost.id)))
        assert.deepStrictEqual(
          (yield* j.readTape(s.id, { afterSeq: 0 })).map((e) => (e._tag === "SessionNote" ? e.text : "")),
          ["first"]
        )
        // The session takes appends as any other; another principal may use the same key.
        yield* j.append(s.id, [note(s, "second")])
        const bob = session("bob", "k")
        yield* j.append(bob.id, [note(bob, "bob's")], { createSession: bob })
        assert.strictEqual(yield* j.headSeq(s.id), 2)
        assert.strictEqual(yield* j.headSeq(bob.id), 1)
        assert.isTrue((yield* j.verify).ok)
      })
    )

    test(
      "concurrent appends to one session stay gap-free and lose nothing",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        yield* Effect.forEach(
          Array.from({ length: 200 }, (_, i) => i),
          (i) => j.append(s.id, [note(s, `n${i}`), note(s, `m${i}`)]),
          { concurrency: 32 }
        )
        const tape = yield* j.readTape(s.id, { afterSeq: 0 })
        assert.strictEqual(tape.length, 400)
        assert.deepStrictEqual(
          tape.map((e) => e.tapeSeq),
          tape.map((_, i) => i + 1)
        )
        // Each append's two events are adjacent (appends are atomic).
        for (let i = 0; i < tape.length; i += 2) {
          const a = tape[i]!
          const b = tape[i + 1]!
          assert.isTrue(a._tag === "SessionNote" && b._tag === "SessionNote" && a.text.slice(1) === b.text.slice(1))
        }
        const v = yield* j.verify
        assert.isTrue(v.ok)
      })
    )

    test(
      "readTape after a seq, with paging, run filter and an upper bound",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        const r = run(s)
        yield* j.append(s.id, [note(s, "a")], { createRun: r })
        for (let i = 0; i < 9; i++) yield* j.append(s.id, [note(s, `x${i}`, i % 2 ? r.id : null)])
        const page1 = yield* j.readTape(s.id, { afterSeq: 3, limit: 4 })
        assert.deepStrictEqual(
          page1.map((e) => e.tapeSeq),
          [4, 5, 6, 7]
        )
        const page2 = yield* j.readTape(s.id, { afterSeq: 7, limit: 4 })
        assert.deepStrictEqual(
          page2.map((e) => e.tapeSeq),
          [8, 9, 10]
        )
        const ofRun = yield* j.readTape(s.id, { afterSeq: 0, runId: r.id })
        assert.isTrue(ofRun.every((e) => e.runId === r.id))
        assert.strictEqual(ofRun.length, 4)
        const bounded = yield* j.readTape(s.id, { afterSeq: 0, uptoSeq: 2 })
        assert.deepStrictEqual(
          bounded.map((e) => e.tapeSeq),
          [1, 2]
        )
        assert.deepStrictEqual(yield* j.readTape(s.id, { afterSeq: 10 }), [])
      })
    )

    test(
      "appending to an unknown session fails with NotFound and stores nothing",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        const error = yield* Effect.flip(j.append(s.id, [note(s, "x")]))
        assert.strictEqual(error._tag, "NotFound")
        assert.strictEqual(yield* j.headSeq(s.id), 0)
      })
    )

    test(
      "an oversized event is refused with PayloadTooLarge and nothing of that append is stored",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        yield* j.append(s.id, [note(s, "ok")])
        const error = yield* Effect.flip(j.append(s.id, [note(s, "small"), note(s, "x".repeat(2 * 1024 * 1024))]))
        assert.strictEqual(error._tag, "PayloadTooLarge")
        assert.strictEqual(yield* j.headSeq(s.id), 1)
        assert.isTrue((yield* j.verify).ok)
      })
    )

    test(
      "a run's terminal transition records its last seq, and its tape reads stay within its range",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        const r = run(s)
        const other = { ...run(s), startSeq: 2 }
        yield* j.append(s.id, [note(s, "admit", r.id)], { createRun: r })
        yield* j.append(s.id, [note(s, "queued", other.id)], { createRun: other })
        yield* j.append(s.id, [note(s, "a", r.id), note(s, "b", r.id)], {
          runTransition: { runId: r.id, from: "Pending", to: "Accepted" }
        })
        assert.isUndefined(Option.getOrThrow(yield* j.getRun(r.id)).endSeq)
        yield* j.append(s.id, [note(s, "c", r.id), note(s, "end", r.id)], {
          runTransition: { runId: r.id, from: "Accepted", to: "Cancelled" }
        })
        yield* j.append(s.id, [note(s, "later", other.id), note(s, "after", r.id)])
        const ended = Option.getOrThrow(yield* j.getRun(r.id))
        assert.strictEqual(ended.endSeq, 6)
        assert.isUndefined(Option.getOrThrow(yield* j.getRun(other.id)).endSeq)
        const texts = (events: ReadonlyArray<unknown>) => events.map((e) => (e as { text: string }).text)
        // Bounded by its end (an event stamped with its id after it — a grant change, a learning note — is not part of its read).
        assert.deepStrictEqual(texts(yield* readRunTape(j, ended)), ["admit", "a", "b", "c", "end"])
        assert.deepStrictEqual(texts(yield* readRunTape(j, r)), ["admit", "a", "b", "c", "end", "after"])
      })
    )

    test(
      "run transitions are compare-and-set and atomic with their events",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        const r = run(s)
        yield* j.append(s.id, [note(s, "admit", r.id)], {
          createRun: r,
          runTransition: { runId: r.id, from: "Pending", to: "Accepted" }
        })
        assert.strictEqual(Option.getOrThrow(yield* j.getRun(r.id)).state, "Accepted")
        const stale = yield* Effect.flip(
          j.append(s.id, [note(s, "should not land", r.id)], {
            runTransition: { runId: r.id, from: "Pending", to: "Accepted" }
          })
        )
        assert.strictEqual(stale._tag, "Conflict")
        assert.strictEqual(yield* j.headSeq(s.id), 1)
        yield* j.append(s.id, [note(s, "fail", r.id)], {
          runTransition: { runId: r.id, from: "Accepted", to: "Failed", error: { code: "x", message: "boom" } }
        })
        const failed = Option.getOrThrow(yield* j.getRun(r.id))
        assert.strictEqual(failed.state, "Failed")
        assert.deepStrictEqual(failed.error, { code: "x", message: "boom" })
        const listed = yield* j.listRuns({ sessionId: s.id, states: ["Failed"] })
        assert.deepStrictEqual(
          listed.map((x) => x.id),
          [r.id]
        )
        assert.deepStrictEqual(yield* j.listRuns({ states: ["InProgress"] }), [])
        // The principal filter applies before the limit.
        assert.deepStrictEqual(
          (yield* j.listRuns({ principal: r.principal, limit: 1 })).map((x) => x.id),
          [r.id]
        )
        assert.deepStrictEqual(yield* j.listRuns({ principal: `${r.principal}-other` }), [])
      })
    )

    test(
      "approvals: compare-and-set from pending; exactly one of many concurrent resolutions wins",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        const r = run(s)
        const a = approval(s, r)
        yield* j.append(s.id, [note(s, "req", r.id)], { createRun: r, createApproval: a })
        assert.strictEqual(Option.getOrThrow(yield* j.getApproval(a.id)).status, "pending")
        const results = yield* Effect.forEach(
          Array.from({ length: 50 }, (_, i) => i),
          (i) =>
            Effect.either(
              j.resolveApproval(a.id, {
                status: i % 2 ? "approved" : "denied",
                scope: "once",
                resolver: `u${i}`,
                reason: "r",
                resolvedAt: 2
              })
            ),
          { concurrency: "unbounded" }
        )
        const winners = results.filter((x) => x._tag === "Right")
        assert.strictEqual(winners.length, 1)
        const stored = Option.getOrThrow(yield* j.getApproval(a.id))
        assert.strictEqual(winners[0]!._tag === "Right" && winners[0]!.right.resolver, stored.resolver)
        const missing = yield* Effect.flip(
          j.resolveApproval(id<ApprovalId>(), {
            status: "approved",
            scope: "once",
            resolver: "x",
            reason: "r",
            resolvedAt: 2
          })
        )
        assert.strictEqual(missing._tag, "NotFound")
        const pending = yield* j.listApprovals({ sessionId: s.id, status: "pending" })
        assert.strictEqual(pending.length, 0)
        const byRun = yield* j.listApprovals({ runId: r.id })
        assert.strictEqual(byRun.length, 1)
      })
    )

    test(
      "standing grants: uses are counted up to a limit, expire, and can be revoked (each compare-and-set)",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        const r = run(s)
        const limited = approval(s, r)
        const expiring = approval(s, r)
        const once = approval(s, r)
        yield* j.append(s.id, [note(s, "req", r.id)], { createRun: r, createApproval: limited })
        yield* j.append(s.id, [note(s, "req", r.id)], { createApproval: expiring })
        yield* j.append(s.id, [note(s, "req", r.id)], { createApproval: once })
        const grant = (grantExpiresAt: number | null, grantMaxUses: number | null, scope: "always" | "once") => ({
          status: "approved" as const,
          scope,
          resolver: "bob",
          reason: "ok",
          resolvedAt: 10,
          grantExpiresAt,
          grantMaxUses
        })
        yield* j.resolveApproval(limited.id, grant(null, 2, "always"))
        yield* j.resolveApproval(expiring.id, grant(1_000, null, "always"))
        yield* j.resolveApproval(once.id, grant(null, null, "once"))
        assert.strictEqual((yield* j.useGrant(limited.id, 20)).grantUses, 1)
        assert.strictEqual((yield* j.useGrant(limited.id, 20)).grantUses, 2)
        assert.strictEqual((yield* Effect.flip(j.useGrant(limited.id, 20)))._tag, "Conflict")
        assert.strictEqual((yield* j.useGrant(expiring.id, 999)).grantUses, 1)
        assert.strictEqual((yield* Effect.flip(j.useGrant(expiring.id, 1_000)))._tag, "Conflict")
        assert.strictEqual((yield* Effect.flip(j.useGrant(once.id, 20)))._tag, "Conflict")
        const revoked = yield* j.revokeGrant(expiring.id, "carol", 30)
        assert.strictEqual(revoked.status, "revoked")
        assert.strictEqual((yield* Effect.flip(j.revokeGrant(expiring.id, "carol", 31)))._tag, "Conflict")
        assert.strictEqual((yield* Effect.flip(j.revokeGrant(once.id, "carol", 31)))._tag, "Conflict")
        const stored = Option.getOrThrow(yield* j.getApproval(limited.id))
        assert.deepStrictEqual([stored.grantUses, stored.grantMaxUses, stored.grantExpiresAt], [2, 2, null])
      })
    )

    test(
      "sessions: create, find by principal and key, update, list; keys are unique per principal",
      Effect.gen(function* () {
        const j = yield* Journal
        const a = session("alice", "chat")
        yield* j.createSession(a)
        const dup = yield* Effect.flip(j.createSession(session("alice", "chat")))
        assert.strictEqual(dup._tag, "Conflict")
        yield* j.createSession(session("bob", "chat"))
        const found = yield* j.findSessionByKey("alice", "chat")
        assert.strictEqual(Option.getOrThrow(found).id, a.id)
        assert.isTrue(Option.isNone(yield* j.findSessionByKey("carol", "chat")))
        yield* j.updateSession({ ...a, title: "Renamed", historyFromSeq: 5, updatedAt: 9 })
        const updated = Option.getOrThrow(yield* j.getSession(a.id))
        assert.strictEqual(updated.title, "Renamed")
        assert.strictEqual(updated.historyFromSeq, 5)
        const mine = yield* j.listSessions({ principal: "alice" })
        assert.deepStrictEqual(
          mine.map((x) => x.id),
          [a.id]
        )
        yield* j.updateSession({ ...updated, archived: true })
        assert.strictEqual((yield* j.listSessions({ principal: "alice" })).length, 0)
        assert.strictEqual((yield* j.listSessions({ principal: "alice", includeArchived: true })).length, 1)
        const missing = yield* Effect.flip(j.updateSession(session("zed")))
        assert.strictEqual(missing._tag, "NotFound")
      })
    )

    test(
      "sessions: the agent a session is bound to is stored, and updates never re-bind it",
      Effect.gen(function* () {
        const j = yield* Journal
        const plain = session("alice", "plain")
        const bound = { ...session("alice", "bound"), agentId: "support" }
        yield* j.createSession(plain)
        yield* j.createSession(bound)
        assert.strictEqual(Option.getOrThrow(yield* j.getSession(plain.id)).agentId, "default")
        assert.strictEqual(Option.getOrThrow(yield* j.findSessionByKey("alice", "bound")).agentId, "support")
        yield* j.updateSession({ ...bound, title: "Renamed", agentId: "ops" })
        const after = Option.getOrThrow(yield* j.getSession(bound.id))
        assert.deepStrictEqual([after.title, after.agentId], ["Renamed", "support"])
        const listed = yield* j.listSessions({ principal: "alice" })
        assert.deepStrictEqual(listed.map((x) => x.agentId).sort(), ["default", "support"])
      })
    )

    test(
      "token counters add up atomically with appends",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        yield* Effect.forEach(
          Array.from({ length: 20 }, () => 0),
          () => j.append(s.id, [note(s, "u")], { addTokens: 5 }),
          { concurrency: 8 }
        )
        assert.strictEqual(Option.getOrThrow(yield* j.getSession(s.id)).tokensUsed, 100)
      })
    )

    test(
      "events round-trip exactly, including nested JSON arguments",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        yield* j.createSession(s)
        const r = run(s)
        const proposed: NewTapeEvent = {
          _tag: "ToolProposed",
          sessionId: s.id,
          runId: r.id,
          at: 1_700_000_000_123,
          toolCallId: id<ToolCallId>(),
          providerCallId: "call_1",
          tool: "fs.read",
          args: { path: "a/b.txt", opts: { lines: [1, 2, 3], follow: false }, note: "ünïcödé ✓" },
          argsDigest: "a".repeat(64)
        }
        const [stored] = yield* j.append(s.id, [proposed], { createRun: r })
        const [read] = yield* j.readTape(s.id, { afterSeq: 0 })
        assert.deepStrictEqual(read, stored)
        assert.deepStrictEqual(read, { ...proposed, tapeSeq: 1 })
      })
    )

    test(
      "checkpoints commit with their append (or not at all), per session, oldest first",
      Effect.gen(function* () {
        const j = yield* Journal
        const s = session()
        const other = session("bob")
        yield* j.createSession(s)
        yield* j.createSession(other)
        const checkpoint = (n: number, sessionId = s.id) => ({
          id: id<string>(),
          sessionId,
          fromSeq: 1,
          toSeq: n,
          summary: `summary ${n}`,
          state: { headSeq: n, pinned: [{ seq: 1, text: "keep 0x1f" }] },
          createdAt: 1_700_000_000_000 + n
        })
        const c1 = checkpoint(1)
        const c2 = checkpoint(2)
        yield* j.append(s.id, [note(s, "a")], { createCheckpoint: c1 })
        yield* j.append(s.id, [note(s, "b")], { createCheckpoint: c2 })
        assert.deepStrictEqual(yield* j.listCheckpoints(s.id), [c1, c2])
        assert.deepStrictEqual(yield* j.getCheckpoint(c2.id), Option.some(c2))
        assert.deepStrictEqual(yield* j.listCheckpoints(other.id), [])
        // A refused append stores neither its events nor its checkpoint.
        const dup = yield* Effect.flip(j.append(s.id, [note(s, "c")], { createCheckpoint: { ...c1, toSeq: 9 } }))
        assert.strictEqual(dup._tag, "Conflict")
        const foreign = yield* Effect.flip(
          j.append(s.id, [note(s, "d")], { createCheckpoint: checkpoint(3, other.id) })
        )
        assert.strictEqual(foreign._tag, "Conflict")
        const r = run(s, "Done")
        const c4 = checkpoint(4)
        const cas = yield* Effect.flip(
          j.append(s.id, [note(s, "e")], {
            createCheckpoint: c4,
            runTransition: { runId: r.id, from: "InProgress", to: "Done" }
          })
        )
        assert.isTrue(cas._tag === "NotFound" || cas._tag === "Conflict")
        assert.isTrue(Option.isNone(yield* j.getCheckpoint(c4.id)))
        assert.strictEqual(yield* j.headSeq(s.id), 2)
        assert.deepStrictEqual((yield* j.listCheckpoints(s.id)).length, 2)
      })
    )
  })

import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Memory, MemoryStore, TaskQueue } from "@palyra/core/memory"
import Database from "better-sqlite3"
import { Effect, Option, type Scope, TestClock } from "effect"
import fc from "fast-check"
import { it as vitestIt } from "vitest"
import { SqliteMemoryStore, SqliteTaskQueue } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-memory-"))
let files = 0
const fresh = () => join(dir, `memory-${files++}.db`)

const adapters: ReadonlyArray<readonly [string, () => Effect.Effect<MemoryStore.Service, unknown, Scope.Scope>]> = [
  ["memory", () => MemoryStore.makeMemory()],
  ["sqlite", () => SqliteMemoryStore.make({ filename: fresh() })]
]

for (const [name, open] of adapters) {
  describe(`MemoryStore (${name})`, () => {
    it.scoped("search ranks by BM25 within the principal's scope; near-identical saves merge", () =>
      Effect.gen(function* () {
        const m = yield* open()
        const coffee = yield* m.save({ principal: "alice", kind: "preference", text: "Alice drinks her coffee black" })
        yield* m.save({ principal: "alice", kind: "fact", text: "The staging database listens on port 5433" })
        yield* m.save({ principal: "alice", kind: "fact", text: "Deploys happen on Tuesdays after standup" })
        yield* m.save({ principal: "bob", kind: "preference", text: "Bob drinks his coffee with milk" })
        assert.strictEqual(coffee.outcome, "created")
        const hits = yield* m.search({ principal: "alice", text: "how does she take her coffee?" })
        assert.deepStrictEqual(
          hits.map((h) => h.item.id),
          [coffee.item.id]
        )
        assert.strictEqual(hits[0]!.relevance, 1)
        // Exact duplicate (case, punctuation), then a near one (one word added): merged, not added.
        yield* TestClock.adjust("1 hour")
        const same = yield* m.save({
          principal: "alice",
          kind: "preference",
          text: "alice drinks her COFFEE black!",
          confidenceBps: 9_000
        })
        assert.strictEqual(same.outcome, "merged")
        assert.strictEqual(same.item.id, coffee.item.id)
        assert.strictEqual(same.item.updatedAt, 3_600_000)
        assert.strictEqual(same.item.confidenceBps, 9_000)
        const near = yield* m.save({
          principal: "alice",
          kind: "preference",
          text: "Alice drinks her coffee black daily"
        })
        assert.strictEqual(near.outcome, "merged")
        // …keeping what the restatement added: its text supersedes, and the new word is searchable.
        assert.strictEqual(near.item.id, coffee.item.id)
        assert.strictEqual(near.item.text, "Alice drinks her coffee black daily")
        assert.deepStrictEqual(
          (yield* m.search({ principal: "alice", text: "daily" })).map((h) => h.item.id),
          [coffee.item.id]
        )
        // A restatement that adds nothing keeps the fuller text.
        const shorter = yield* m.save({
          principal: "alice",
          kind: "preference",
          text: "Alice drinks coffee black daily"
        })
        assert.strictEqual(shorter.outcome, "merged")
        assert.strictEqual(shorter.item.text, "Alice drinks her coffee black daily")
        // Another kind, or another principal, is another item.
        assert.strictEqual(
          (yield* m.save({ principal: "alice", kind: "note", text: "Alice drinks her coffee black" })).outcome,
          "created"
        )
        assert.strictEqual(
          (yield* m.save({ principal: "carol", kind: "preference", text: "Alice drinks her coffee black" })).outcome,
          "created"
        )
        assert.strictEqual((yield* m.list("alice")).length, 4)
        // Hostile query syntax is just words.
        assert.deepStrictEqual(yield* m.search({ principal: "alice", text: '") OR scope : * NEAR(' }), [])
        assert.strictEqual((yield* Effect.flip(m.search({ principal: "", text: "coffee" })))._tag, "InvalidArgument")
      })
    )

    it.scoped("recency breaks ties; pinned items are boosted", () =>
      Effect.gen(function* () {
        const m = yield* open()
        const old = yield* m.save({ principal: "a", kind: "fact", text: "the build server is named hopper" })
        yield* TestClock.adjust("60 days")
        const recent = yield* m.save({ principal: "a", kind: "fact", text: "the build server was renamed lovelace" })
        const hits = yield* m.search({ principal: "a", text: "build server" })
        assert.deepStrictEqual(
          hits.map((h) => h.item.id),
          [recent.item.id, old.item.id]
        )
        assert.isAbove(hits[0]!.recency, hits[1]!.recency)
        const pinned = yield* m.save({
          principal: "a",
          kind: "note",
          text: "build server keys rotate monthly",
          pinned: true
        })
        assert.strictEqual((yield* m.search({ principal: "a", text: "build server" }))[0]!.item.id, pinned.item.id)
      })
    )

    it.scoped("agent- and session-scoped items are found only in their agent and session", () =>
      Effect.gen(function* () {
        const m = yield* open()
        yield* m.save({ principal: "p", kind: "fact", text: "general kiwi fact" })
        yield* m.save({ principal: "p", agent: "coder", kind: "fact", text: "coder kiwi fact" })
        yield* m.save({ principal: "p", sessionId: "S1", kind: "fact", text: "session kiwi fact" })
        const texts = (agent: string | null, sessionId: string | null) =>
          Effect.map(m.search({ principal: "p", agent, sessionId, text: "kiwi" }), (hits) =>
            hits.map((h) => h.item.text).sort()
          )
        assert.deepStrictEqual(yield* texts(null, null), ["general kiwi fact"])
        assert.deepStrictEqual(yield* texts("coder", null), ["coder kiwi fact", "general kiwi fact"])
        assert.deepStrictEqual(yield* texts("writer", "S1"), ["general kiwi fact", "session kiwi fact"])
        assert.deepStrictEqual(yield* texts("coder", "S1"), [
          "coder kiwi fact",
          "general kiwi fact",
          "session kiwi fact"
        ])
      })
    )

    it.scoped("items expire after their TTL; forget only reaches the principal's own items", () =>
      Effect.gen(function* () {
        const m = yield* open()
        const short = yield* m.save({ principal: "a", kind: "note", text: "temporary walrus code", ttl: "1 hour" })
        const mine = yield* m.save({ principal: "a", kind: "note", text: "permanent walrus note" })
        assert.strictEqual((yield* m.search({ principal: "a", text: "walrus" })).length, 2)
        yield* TestClock.adjust("61 minutes")
        assert.deepStrictEqual(
          (yield* m.search({ principal: "a", text: "walrus" })).map((h) => h.item.id),
          [mine.item.id]
        )
        assert.isTrue(Option.isNone(yield* m.get("a", short.item.id)))
        assert.strictEqual(yield* m.purgeExpired, 1)
        assert.strictEqual((yield* Effect.flip(m.forget("b", mine.item.id)))._tag, "NotFound")
        assert.isTrue(Option.isNone(yield* m.get("b", mine.item.id)))
        yield* m.forget("a", mine.item.id)
        assert.deepStrictEqual(yield* m.search({ principal: "a", text: "walrus" }), [])
      })
    )

    it.scoped("candidates: a pending duplicate is proposed once; accepting saves it, deciding twice conflicts", () =>
      Effect.gen(function* () {
        const m = yield* open()
        const c = yield* m.propose({
          principal: "a",
          kind: "preference",
          text: "Likes short answers",
          confidenceBps: 7_000
        })
        const again = yield* m.propose({
          principal: "a",
          kind: "preference",
          text: "likes short answers.",
          confidenceBps: 6_000
        })
        assert.strictEqual(again.id, c.id)
        assert.deepStrictEqual(
          (yield* m.candidates({ principal: "a", status: "pending" })).map((x) => x.id),
          [c.id]
        )
        assert.deepStrictEqual(yield* m.candidates({ principal: "b" }), [])
        const { candidate, item } = yield* m.decide(c.id, { status: "accepted", by: "a" })
        assert.strictEqual(candidate.status, "accepted")
        assert.strictEqual(candidate.itemId, item!.id)
        assert.strictEqual(item!.confidenceBps, 7_000)
        assert.strictEqual((yield* Effect.flip(m.decide(c.id, { status: "rejected", by: "a" })))._tag, "Conflict")
        assert.strictEqual((yield* m.search({ principal: "a", text: "short answers" }))[0]!.item.id, item!.id)
        const bad = yield* Effect.flip(m.propose({ principal: "a", kind: "fact", text: "x y", confidenceBps: 20_000 }))
        assert.strictEqual(bad._tag, "InvalidArgument")
      })
    )
  })
}

const WORDS = ["coffee", "deploy", "tuesday", "kiwi", "port", "staging", "lovelace", "hopper", "tea", "walrus"]
const PRINCIPALS = ["alice", "bob", "carol"]

describe("memory isolation (property)", () => {
  for (const [name, open] of adapters) {
    vitestIt(
      `${name}: a search for one principal never returns another principal's items`,
      async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(
              fc.record({
                principal: fc.constantFrom(...PRINCIPALS),
                words: fc.array(fc.constantFrom(...WORDS), { minLength: 1, maxLength: 5 })
              }),
              { minLength: 1, maxLength: 30 }
            ),
            fc.constantFrom(...PRINCIPALS),
            fc.array(fc.constantFrom(...WORDS), { minLength: 1, maxLength: 4 }),
            async (items, principal, query) => {
              await Effect.runPromise(
                Effect.scoped(
                  Effect.gen(function* () {
                    const m = yield* open()
                    yield* m.saveMany(
                      items.map((i) => ({ principal: i.principal, kind: "fact", text: i.words.join(" ") }))
                    )
                    const hits = yield* m.search({ principal, text: query.join(" "), limit: 50 })
                    for (const h of hits) assert.strictEqual(h.item.principal, principal)
                    // …and the search is not vacuous: the principal's matching items are found.
                    const expected = items.some(
                      (i) => i.principal === principal && i.words.some((w) => query.includes(w))
                    )
                    assert.strictEqual(hits.length > 0, expected)
                  })
                ) as Effect.Effect<void>
              )
            }
          ),
          { numRuns: 30 }
        )
      },
      120_000
    )
  }
})

describe("SqliteMemoryStore", () => {
  it.scoped("a search sees at once what another connection saved (an empty principal is not cached)", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const reader = yield* SqliteMemoryStore.make({ filename })
      const writer = yield* SqliteMemoryStore.make({ filename })
      const query = { principal: "a", agent: null, sessionId: null, text: "which walrus likes tea" }
      assert.deepStrictEqual(yield* reader.search(query), [])
      yield* writer.save({ principal: "b", kind: "fact", text: "the walrus likes tea" })
      assert.deepStrictEqual(yield* reader.search(query), [])
      const saved = yield* writer.save({ principal: "a", kind: "fact", text: "the walrus likes green tea" })
      const hits = yield* reader.search(query)
      assert.deepStrictEqual(
        hits.map((h) => h.item.id),
        [saved.item.id]
      )
      yield* writer.forget("a", saved.item.id)
      assert.deepStrictEqual(yield* reader.search(query), [])
    })
  )

  it.scoped("forgotten and redacted text leaves nothing in the file's FTS index", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const m = yield* SqliteMemoryStore.make({ filename })
      const vocabulary = () => {
        const db = new Database(filename)
        db.prepare("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, memory_fts, row)").run()
        const terms = (db.prepare("SELECT term FROM temp.v").all() as Array<{ term: string }>).map((r) => r.term)
        db.close()
        return terms
      }
      const saved = yield* m.save({ principal: "a", kind: "note", text: "the zebracorn password=hunter2hunter2" })
      assert.notInclude(saved.item.text, "hunter2hunter2")
      const before = vocabulary()
      assert.isTrue(before.some((t) => t.endsWith("zebracorn")))
      assert.isFalse(before.some((t) => t.includes("hunter2")))
      yield* m.forget("a", saved.item.id)
      assert.deepStrictEqual(vocabulary(), [])
    })
  )

  it.scoped("the memory.purge task deletes expired items from the file", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const m = yield* SqliteMemoryStore.make({ filename })
      const q = yield* SqliteTaskQueue.make({ filename })
      yield* m.save({ principal: "a", kind: "note", text: "short lived otter", ttl: "1 hour" })
      yield* m.save({ principal: "a", kind: "note", text: "long lived otter" })
      yield* TestClock.adjust("2 hours")
      yield* TaskQueue.worker({ handlers: Memory.handlers(m), pollInterval: "1 second" }).pipe(
        Effect.provideService(TaskQueue.TaskQueue, q)
      )
      const task = yield* q.enqueue({ kind: Memory.PURGE })
      yield* TestClock.adjust("1 second")
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      assert.strictEqual(Option.getOrThrow(yield* q.get(task.id)).state, "succeeded")
      const db = new Database(filename, { readonly: true })
      const rows = db.prepare("SELECT text FROM memory_items").all()
      db.close()
      assert.deepStrictEqual(rows, [{ text: "long lived otter" }])
    })
  )
})

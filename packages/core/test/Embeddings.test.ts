import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Embeddings, MemoryStore } from "../src/memory.js"

/** A small embedder by concepts: words of one concept share a dimension (what a real model learns). */
const CONCEPTS: ReadonlyArray<ReadonlyArray<string>> = [
  ["car", "automobile", "vehicle", "drives"],
  ["coffee", "espresso", "latte"],
  ["port", "listens", "database"]
]
const embedText = (text: string): Array<number> => {
  const v = Array.from({ length: CONCEPTS.length + 1 }, () => 0)
  for (const word of text.toLowerCase().split(/\W+/).filter(Boolean)) {
    const i = CONCEPTS.findIndex((c) => c.includes(word))
    v[i < 0 ? CONCEPTS.length : i]! += i < 0 ? 0.1 : 1
  }
  return v
}
const embedder: Embeddings.Embedder = { model: "concepts", embed: (texts) => Effect.sync(() => texts.map(embedText)) }

describe("Embeddings.withVectors", () => {
  it.effect("finds an item by meaning (no word in common), only for its principal, and forgets it", () =>
    Effect.gen(function* () {
      const store = Embeddings.withVectors(yield* MemoryStore.makeMemory(), { embedder })
      const { item } = yield* store.save({ principal: "alice", kind: "fact", text: "Alice drives an old automobile" })
      yield* store.save({ principal: "alice", kind: "preference", text: "Alice takes espresso in the morning" })
      yield* store.save({ principal: "bob", kind: "fact", text: "Bob drives a red automobile" })
      // "car" shares no word with the item: lexical search alone finds nothing…
      const plain = yield* MemoryStore.makeMemory()
      yield* plain.save({ principal: "alice", kind: "fact", text: "Alice drives an old automobile" })
      assert.deepStrictEqual(yield* plain.search({ principal: "alice", text: "car" }), [])
      // …the vectors do, and rank it first.
      const hits = yield* store.search({ principal: "alice", text: "car" })
      assert.strictEqual(hits[0]!.item.id, item.id)
      assert.isTrue(hits.every((h) => h.item.principal === "alice"))
      assert.notInclude(
        hits.map((h) => h.item.text),
        "Bob drives a red automobile"
      )
      // Words and meaning together outrank meaning alone.
      const both = yield* store.search({ principal: "alice", text: "automobile" })
      assert.strictEqual(both[0]!.item.id, item.id)
      assert.isAbove(both[0]!.score, hits[0]!.score)
      // Kinds filter the vector hits too.
      assert.deepStrictEqual(yield* store.search({ principal: "alice", text: "car", kinds: ["preference"] }), [])
      yield* store.forget("alice", item.id)
      assert.notInclude(
        (yield* store.search({ principal: "alice", text: "car" })).map((h) => h.item.id),
        item.id
      )
    })
  )

  it.effect("an embedder that fails costs the vectors only: items are saved and found by their words", () =>
    Effect.gen(function* () {
      const failing: Embeddings.Embedder = { model: "down", embed: () => Effect.fail("model unavailable") }
      const store = Embeddings.withVectors(yield* MemoryStore.makeMemory(), { embedder: failing })
      const saved = yield* store.save({
        principal: "alice",
        kind: "fact",
        text: "The staging database listens on 5433"
      })
      assert.strictEqual(saved.outcome, "created")
      const hits = yield* store.search({ principal: "alice", text: "staging database" })
      assert.deepStrictEqual(
        hits.map((h) => h.item.id),
        [saved.item.id]
      )
    })
  )

  it("cosine and topK", () => {
    assert.closeTo(Embeddings.cosine(Float32Array.of(1, 0), Float32Array.of(1, 0)), 1, 1e-9)
    assert.strictEqual(Embeddings.cosine(Float32Array.of(1, 0), Float32Array.of(0, 1)), 0)
    assert.strictEqual(Embeddings.cosine(Float32Array.of(0, 0), Float32Array.of(1, 1)), 0)
    const top = Embeddings.topK(
      [
        { id: "a", vector: Float32Array.of(1, 0) },
        { id: "b", vector: Float32Array.of(0.7, 0.7) },
        { id: "c", vector: Float32Array.of(0, 1) }
      ],
      Float32Array.of(1, 0.1),
      2
    )
    assert.deepStrictEqual(
      top.map((t) => t.id),
      ["a", "b"]
    )
  })
})

import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Embeddings } from "@palyra/core/memory"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { SqliteMemoryStore, SqliteVectorIndex } from "../src/index.js"

const CONCEPTS = [
  ["car", "automobile", "drives"],
  ["coffee", "espresso"]
]
const vectorOf = (text: string) => {
  const v = [0, 0, 0.01]
  for (const w of text.toLowerCase().split(/\W+/)) {
    const i = CONCEPTS.findIndex((c) => c.includes(w))
    if (i >= 0) v[i]! += 1
  }
  return v
}
const embedded: Array<string> = []
const embedder: Embeddings.Embedder = {
  model: "concepts",
  embed: (texts) =>
    Effect.sync(() => {
      embedded.push(...texts)
      return texts.map(vectorOf)
    })
}

const open = (filename: string) =>
  Effect.gen(function* () {
    const store = yield* SqliteMemoryStore.make({ filename })
    const index = yield* SqliteVectorIndex.make({ filename })
    return Embeddings.withVectors(store, { embedder, index })
  })

describe("SqliteVectorIndex", () => {
  it.live("vectors are kept beside the items: found by meaning after a reopen, per principal, gone with the item", () =>
    Effect.gen(function* () {
      const filename = join(mkdtempSync(join(tmpdir(), "palyra-vectors-")), "journal.db")
      const id = yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* open(filename)
          const { item } = yield* store.save({ principal: "alice", kind: "fact", text: "Alice drives an automobile" })
          yield* store.save({ principal: "bob", kind: "fact", text: "Bob drives an automobile too" })
          return item.id
        })
      )
      embedded.length = 0
      yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* open(filename)
          const hits = yield* store.search({ principal: "alice", text: "car" })
          assert.deepStrictEqual(
            hits.map((h) => h.item.id),
            [id]
          )
          // Only the query was embedded: the items' vectors came from the file.
          assert.deepStrictEqual(embedded, ["car"])
          yield* store.forget("alice", id)
          assert.deepStrictEqual(yield* store.search({ principal: "alice", text: "car" }), [])
        })
      )
      const db = new Database(filename, { readonly: true })
      const rows = db.prepare("SELECT principal, model, dim FROM memory_vectors").all()
      db.close()
      assert.deepStrictEqual(rows, [{ principal: "bob", model: "concepts", dim: 3 }])
    })
  )
})

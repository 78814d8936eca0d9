/**
 * `AiSdkEmbedder` through the AI SDK's OpenAI-compatible provider against a local server speaking
 * the `/embeddings` API; memory search with those vectors finds an item by meaning.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AiSdkEmbedder } from "../src/ai-sdk.js"
import { Errors } from "../src/index.js"
import { Embeddings, MemoryStore } from "../src/memory.js"

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

const serve = async (fail = false) => {
  const seen: Array<{ model: string; input: Array<string> }> = []
  const server: Server = createServer((req, res) => {
    let body = ""
    req.on("data", (d) => (body += d))
    req.on("end", () => {
      const request = JSON.parse(body) as { model: string; input: Array<string> }
      seen.push(request)
      if (fail || req.url !== "/v1/embeddings") {
        res.writeHead(fail ? 503 : 404, { "content-type": "application/json" })
        return res.end(JSON.stringify({ error: { message: "unavailable" } }))
      }
      res.writeHead(200, { "content-type": "application/json" })
      res.end(
        JSON.stringify({
          object: "list",
          model: request.model,
          data: request.input.map((t, index) => ({ object: "embedding", index, embedding: vectorOf(t) })),
          usage: { prompt_tokens: 1, total_tokens: 1 }
        })
      )
    })
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const provider = createOpenAICompatible({
    name: "local",
    baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
  })
  return { embedder: AiSdkEmbedder.make(provider.embeddingModel("concepts")), seen, close: () => server.close() }
}

describe("AiSdkEmbedder", () => {
  it.live("embeds through the AI SDK; memory finds an item by meaning", () =>
    Effect.gen(function* () {
      const local = yield* Effect.promise(() => serve())
      yield* Effect.addFinalizer(() => Effect.sync(local.close))
      assert.strictEqual(local.embedder.model, "local.embedding:concepts")
      const vectors = yield* local.embedder.embed(["an automobile", "espresso"])
      assert.deepStrictEqual(vectors, [vectorOf("an automobile"), vectorOf("espresso")])
      const store = Embeddings.withVectors(yield* MemoryStore.makeMemory(), { embedder: local.embedder })
      const { item } = yield* store.save({ principal: "alice", kind: "fact", text: "Alice drives an automobile" })
      const [hit] = yield* store.search({ principal: "alice", text: "car" })
      assert.strictEqual(hit?.item.id, item.id)
      assert.deepStrictEqual(
        local.seen.map((s) => s.input),
        [["an automobile", "espresso"], ["Alice drives an automobile"], ["car"]]
      )
    }).pipe(Effect.scoped)
  )

  it.live("a failing embedding server is a ProviderError", () =>
    Effect.gen(function* () {
      const local = yield* Effect.promise(() => serve(true))
      yield* Effect.addFinalizer(() => Effect.sync(local.close))
      const error = yield* Effect.flip(local.embedder.embed(["x"]))
      assert.instanceOf(error, Errors.ProviderError)
    }).pipe(Effect.scoped)
  )
})

import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, JSONSchema, Schema } from "effect"
import { Tool } from "../src/index.js"
import { Memory, MemoryStore } from "../src/memory.js"
import { BuiltinTools } from "../src/tools.js"

// A schema that counts how often its JSON Schema is generated: `JSONSchema.make` forces a
// `Schema.suspend`'s thunk, building a decoder does not (a suspend is forced on its first parse).
const counted = () => {
  let forced = 0
  const schema = Schema.Struct({
    path: Schema.String.pipe(Schema.minLength(1)),
    depth: Schema.optional(Schema.Int.pipe(Schema.between(0, 8))),
    tags: Schema.Array(
      Schema.suspend(() => {
        forced++
        return Schema.Literal("a", "b")
      }).annotations({ identifier: "Tag" })
    )
  })
  return { schema, forced: () => forced }
}

const options = <S extends Schema.Schema.AnyNoContext>(parameters: S) => ({
  description: "d",
  parameters,
  execute: (args: Schema.Schema.Type<S>) => Effect.succeed(args)
})

const argsCases: ReadonlyArray<unknown> = [
  { path: "a.txt", tags: ["a"] },
  { path: "a.txt", depth: 3, tags: [] },
  { path: "", tags: ["c"] },
  { path: "a.txt", depth: 9.5, tags: ["a", "b"] },
  { path: "a.txt", tags: [], extra: 1 },
  null,
  "text",
  { tags: "a" }
]

describe("Tool.makeLazy", () => {
  it("builds the JSON Schema on its first read, once, equal to make's", () => {
    const { forced, schema } = counted()
    const lazy = Tool.makeLazy("t", options(schema))
    const runtime = Tool.makeRuntime([lazy])
    assert.strictEqual(forced(), 0, "not built at definition nor by the runtime's specs")
    const spec = runtime.specs[0]!
    assert.deepStrictEqual(spec.parameters, JSONSchema.make(schema) as unknown)
    const after = forced()
    assert.isAbove(after, 0)
    assert.strictEqual(lazy.parameters, spec.parameters, "the spec reads the tool's one value")
    assert.strictEqual(lazy.parameters, lazy.parameters)
    assert.strictEqual(forced(), after, "built once")
    assert.deepStrictEqual(JSON.parse(JSON.stringify(runtime.specs)), [
      { name: "t", description: "d", parameters: JSONSchema.make(schema) as unknown }
    ])
  })

  it("Tool.make still builds it at definition", () => {
    const { forced, schema } = counted()
    const eager = Tool.make("t", options(schema))
    assert.isAbove(forced(), 0)
    assert.deepStrictEqual(eager.parameters, JSONSchema.make(schema) as unknown)
  })

  it.effect("decodes exactly as make does: the same values and the same error messages", () =>
    Effect.gen(function* () {
      const lazy = Tool.makeLazy("t", options(counted().schema))
      const eager = Tool.make("t", options(counted().schema))
      for (const args of argsCases) {
        const a = yield* Effect.either(lazy.decode(args))
        const b = yield* Effect.either(eager.decode(args))
        assert.deepStrictEqual(a, b, JSON.stringify(args))
      }
      const bad = yield* Effect.either(lazy.decode({ path: "", tags: ["c"], extra: 1 }))
      assert.isTrue(Either.isLeft(bad))
      if (Either.isLeft(bad)) {
        assert.strictEqual(bad.left.reason, "invalid_arguments")
        assert.include(bad.left.message, "extra")
      }
    })
  )

  it("a schema JSON Schema cannot express: make throws at definition, makeLazy at the first read", () => {
    const parameters = Schema.Struct({ n: Schema.BigIntFromSelf })
    assert.throws(() => Tool.make("t", options(parameters)))
    const lazy = Tool.makeLazy("t", options(parameters))
    assert.throws(() => lazy.parameters)
  })

  it.effect("every built-in tool's JSON Schema is expressible, and is what the runtime's specs carry", () =>
    Effect.gen(function* () {
      const store = yield* MemoryStore.makeMemory()
      const tools = [
        ...BuiltinTools.all({ workspace: mkdtempSync(join(tmpdir(), "palyra-lazy-")) }),
        ...Memory.tools(store)
      ]
      const runtime = Tool.makeRuntime(tools)
      assert.isAbove(tools.length, 6)
      tools.forEach((tool, i) => {
        const parameters = tool.parameters
        assert.strictEqual(parameters.$schema, "http://json-schema.org/draft-07/schema#", tool.name)
        assert.strictEqual(runtime.specs[i]!.parameters, parameters)
      })
    })
  )
})

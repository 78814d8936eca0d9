import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as fc from "fast-check"
import { Caller, Errors, ScriptedModel, type TapeEvent, Tool } from "../src/index.js"
import { collect } from "../src/testing.js"
import { withGateway } from "./helpers.js"

const context = {
  sessionId: "01KA0000000000000000000SES" as never,
  runId: "01KA0000000000000000000RUN" as never,
  toolCallId: "01KA00000000000000000000TC" as never,
  principal: "test",
  note: () => Effect.void
}

/** Parameters that use what the old hand-written subset ignored: $ref/$defs, oneOf, allOf, not, format. */
const parameters = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  type: "object",
  $defs: {
    email: { type: "string", format: "email" },
    coordinate: { type: "integer" },
    point: {
      type: "object",
      properties: { x: { $ref: "#/$defs/coordinate" }, y: { $ref: "#/$defs/coordinate" } },
      required: ["x", "y"],
      additionalProperties: false
    }
  },
  properties: {
    contact: { $ref: "#/$defs/email" },
    at: { $ref: "#/$defs/point" },
    shape: {
      oneOf: [
        {
          type: "object",
          properties: { kind: { const: "circle" }, r: { type: "number", exclusiveMinimum: 0 } },
          required: ["kind", "r"],
          additionalProperties: false
        },
        {
          type: "object",
          properties: { kind: { const: "square" }, side: { type: "integer", minimum: 1 } },
          required: ["kind", "side"],
          additionalProperties: false
        }
      ]
    },
    // exactly one of: even, multiple of 3 (6 is both, so it is refused)
    tag: {
      oneOf: [
        { type: "integer", multipleOf: 2 },
        { type: "integer", multipleOf: 3 }
      ]
    },
    count: { allOf: [{ type: "integer" }, { minimum: 1 }, { maximum: 100 }] },
    name: { type: "string", minLength: 1, not: { pattern: "^admin" } },
    when: { type: "string", format: "date-time" }
  },
  required: ["contact", "at", "shape", "tag", "count", "name"],
  additionalProperties: false
} as const

type Args = Record<string, unknown>

const word = fc.stringMatching(/^[a-z][a-z0-9]{0,8}$/)
const valid: fc.Arbitrary<Args> = fc.record(
  {
    contact: fc.tuple(word, word).map(([user, domain]) => `${user}@${domain}.com`),
    at: fc.record({ x: fc.integer(), y: fc.integer() }),
    shape: fc.oneof(
      fc.record({
        kind: fc.constant("circle"),
        r: fc.double({ min: 0.001, max: 1e6, noNaN: true, noDefaultInfinity: true })
      }),
      fc.record({ kind: fc.constant("square"), side: fc.integer({ min: 1, max: 10_000 }) })
    ),
    tag: fc.integer({ min: -10_000, max: 10_000 }).filter((n) => (n % 2 === 0) !== (n % 3 === 0)),
    count: fc.integer({ min: 1, max: 100 }),
    name: word.filter((s) => !s.startsWith("admin")),
    when: fc
      .date({ min: new Date("1970-01-01T00:00:00Z"), max: new Date("2100-01-01T00:00:00Z"), noInvalidDate: true })
      .map((d) => d.toISOString())
  },
  { requiredKeys: ["contact", "at", "shape", "tag", "count", "name"] }
)

/** Each breaks exactly one rule, and names the path the error must mention. */
const mutations: ReadonlyArray<readonly [string, string, (v: Args, n: number) => Args]> = [
  ["format email (via $ref)", "/contact", (v) => ({ ...v, contact: String(v.contact).replace("@", "") })],
  ["required inside a $ref", "/at/y", (v) => ({ ...v, at: { x: (v.at as { x: number }).x } })],
  ["integer via nested $ref", "/at/x", (v) => ({ ...v, at: { ...(v.at as object), x: 0.5 } })],
  ["oneOf: no branch", "/shape", (v) => ({ ...v, shape: { kind: "circle", r: 1, side: 2 } })],
  ["oneOf: both branches", "/tag", (v, n) => ({ ...v, tag: 6 * n })],
  ["oneOf: neither branch", "/tag", (v, n) => ({ ...v, tag: 6 * n + 1 })],
  ["allOf minimum", "/count", (v) => ({ ...v, count: 0 })],
  ["allOf maximum", "/count", (v, n) => ({ ...v, count: 101 + Math.abs(n) })],
  ["allOf type", "/count", (v) => ({ ...v, count: 1.5 })],
  ["not", "/name", (v) => ({ ...v, name: `admin${String(v.name)}` })],
  ["format date-time", "/when", (v) => ({ ...v, when: "yesterday at noon" })],
  ["additionalProperties", "/extra", (v) => ({ ...v, extra: true })],
  ["required", "/contact", ({ contact: _, ...rest }) => rest],
  ["not an object", "/", (v) => [v] as unknown as Args]
]

const makeTool = () => {
  const calls: Array<unknown> = []
  const tool = Tool.fromJsonSchema<Args>("shapes.place", {
    description: "place a shape",
    parameters,
    risk: "low",
    execute: (args) => Effect.sync(() => calls.push(args))
  })
  return { tool, calls, runtime: Tool.makeRuntime([tool]) }
}

describe("Tool.fromJsonSchema validates with Ajv", () => {
  it.effect("property: valid arguments run the tool with exactly those arguments", () =>
    Effect.promise(() => {
      const { tool, calls, runtime } = makeTool()
      return fc.assert(
        fc.asyncProperty(valid, async (args) => {
          const before = calls.length
          const outcome = await Effect.runPromise(Effect.either(runtime.execute(tool, args, context)))
          assert.isTrue(Either.isRight(outcome), JSON.stringify(Either.isLeft(outcome) ? outcome.left.message : ""))
          assert.strictEqual(calls.length, before + 1)
          assert.deepStrictEqual(calls.at(-1), args)
        }),
        { numRuns: 300 }
      )
    })
  )

  it.effect("property: invalid arguments are refused with their path, and execute never runs", () =>
    Effect.promise(() => {
      const { tool, calls, runtime } = makeTool()
      return fc.assert(
        fc.asyncProperty(
          valid,
          fc.constantFrom(...mutations),
          fc.integer({ min: -1000, max: 1000 }),
          async (v, m, n) => {
            const [, path, mutate] = m
            const outcome = await Effect.runPromise(Effect.either(runtime.execute(tool, mutate(v, n), context)))
            assert.isTrue(Either.isLeft(outcome), m[0])
            if (Either.isLeft(outcome)) {
              assert.strictEqual(outcome.left.reason, "invalid_arguments")
              assert.include(outcome.left.message, `${path}:`, m[0])
            }
            assert.strictEqual(calls.length, 0)
          }
        ),
        { numRuns: 300 }
      )
    })
  )

  it("an invalid schema is refused when the tool is defined", () => {
    const define = (parameters: Record<string, unknown>) => () =>
      Tool.fromJsonSchema("bad", { description: "d", parameters, execute: () => Effect.void })
    for (const [schema, why] of [
      [{ type: "object", properties: { a: { type: "string" } }, requried: ["a"] }, /unknown keyword: "requried"/],
      [{ type: "string", format: "emial" }, /unknown format "emial"/],
      [{ $ref: "#/$defs/missing" }, /can't resolve reference/],
      [{ $schema: "http://json-schema.org/draft-04/schema#", type: "object" }, /unsupported \$schema/],
      [{ type: "strnig" }, /type/]
    ] as const) {
      try {
        define(schema)()
        assert.fail(`accepted ${JSON.stringify(schema)}`)
      } catch (error) {
        assert.instanceOf(error, Errors.InvalidArgument)
        assert.match((error as Errors.InvalidArgument).message, why)
      }
    }
  })

  it.effect("draft-07 schemas (as Effect's JSONSchema.make writes them) keep draft-07 meaning", () =>
    Effect.gen(function* () {
      const tool = Tool.fromJsonSchema("pair", {
        description: "d",
        parameters: {
          $schema: "http://json-schema.org/draft-07/schema#",
          type: "object",
          definitions: { n: { type: "number" } },
          properties: { pair: { type: "array", items: [{ $ref: "#/definitions/n" }, { type: "string" }] } },
          required: ["pair"]
        },
        execute: () => Effect.void
      })
      yield* tool.decode({ pair: [1, "a"] })
      const error = yield* Effect.flip(tool.decode({ pair: ["a", 1] }))
      assert.include(error.message, "/pair/0: must be number")
      assert.include(error.message, "/pair/1: must be string")
    })
  )

  it.effect("schemas with the same $id in two tools do not clash", () =>
    Effect.gen(function* () {
      const a = Tool.fromJsonSchema("a", {
        description: "d",
        parameters: { $id: "https://example.com/args", type: "object", properties: { n: { type: "number" } } },
        execute: () => Effect.void
      })
      const b = Tool.fromJsonSchema("b", {
        description: "d",
        parameters: { $id: "https://example.com/args", type: "object", properties: { n: { type: "string" } } },
        execute: () => Effect.void
      })
      yield* a.decode({ n: 1 })
      yield* b.decode({ n: "1" })
      assert.strictEqual((yield* Effect.flip(b.decode({ n: 1 }))).reason, "invalid_arguments")
    })
  )
})

describe("invalid arguments through the real Gateway", () => {
  const only = <T extends TapeEvent.TapeEvent["_tag"]>(events: ReadonlyArray<TapeEvent.TapeEvent>, tag: T) =>
    events.filter((e): e is TapeEvent.TapeEventOf<T> => e._tag === tag)

  it.effect("become a ToolResult error the model reads; the tool's body never runs; the run goes on", () =>
    Effect.gen(function* () {
      const { tool, calls } = makeTool()
      const bad = { contact: "nobody", at: { x: 1 }, shape: { kind: "circle", r: 1 }, tag: 6, count: 0, name: "admin" }
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "shapes.place", args: bad }] },
        { text: "Let me fix the arguments." }
      ])
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const seen = yield* collect((yield* gateway.startRun(Caller.user("alice"), { text: "place it" })).events)
          assert.deepStrictEqual(calls, [])
          assert.strictEqual(only(seen, "PolicyDecided")[0]!.decision, "allow")
          const result = only(seen, "ToolResult")[0]!
          assert.strictEqual(result.status, "error")
          assert.match(result.output, /^invalid_arguments: /)
          for (const path of ["/contact:", "/at/y:", "/tag:", "/count:", "/name:"]) assert.include(result.output, path)
          const toModel = model.prompts[1]!.messages.at(-1)!
          assert.strictEqual(toModel.role, "tool")
          assert.include((toModel as { output: string }).output, result.output)
          assert.strictEqual(only(seen, "RunStateChanged").at(-1)!.to, "Done")
        })
      )
    })
  )
})

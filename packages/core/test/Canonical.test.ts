/**
 * Canonical JSON is what the journal's hash chain and the tool-argument digests are computed over:
 * its bytes must never change. Checked against the plain definition (keys sorted by code unit at
 * every level, `undefined` and functions dropped from objects and `null` in arrays, non-finite
 * numbers `null`, bigints as strings) over generated values, including field names that recur (the
 * memo of quoted names, past its bound too) and key lists already in order.
 */

import { createHash } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { Canonical } from "../src/index.js"

const reference = (value: unknown): string => {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value)
    case "number":
      return Number.isFinite(value) ? String(value) : "null"
    case "boolean":
      return value ? "true" : "false"
    case "bigint":
      return JSON.stringify(value.toString())
    case "object": {
      if (value === null) return "null"
      if (Array.isArray(value))
        return `[${value.map((v) => (v === undefined || typeof v === "function" ? "null" : reference(v))).join(",")}]`
      const obj = value as Record<string, unknown>
      const fields = Object.keys(obj)
        .sort()
        .filter((k) => obj[k] !== undefined && typeof obj[k] !== "function")
        .map((k) => `${JSON.stringify(k)}:${reference(obj[k])}`)
      return `{${fields.join(",")}}`
    }
    default:
      return "null"
  }
}

const names = fc.oneof(
  fc.constantFrom("a", "b", "turn", "text", "_tag", "10", "9", "é", "\u2028", "__proto__"),
  fc.string()
)
const leaf = fc.oneof(
  fc.string(),
  fc.double(),
  fc.bigInt(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.constant(() => 1)
)
const value = fc.letrec((tie) => ({
  node: fc.oneof({ depthSize: "small" }, leaf, tie("array"), tie("object")),
  array: fc.array(tie("node"), { maxLength: 5 }),
  object: fc.dictionary(names, tie("node"), { maxKeys: 6 })
})).node

describe("Canonical.canonicalJson", () => {
  it("is byte for byte the plain definition, for any value", () => {
    fc.assert(
      fc.property(value, (v) => Canonical.canonicalJson(v) === reference(v)),
      { numRuns: 2000 }
    )
  })

  it("stays so past the memo of field names, and for keys in order or not", () => {
    for (let i = 0; i < 3000; i++) Canonical.canonicalJson({ [`k${i}`]: i })
    const sorted = { a: 1, b: [2, { c: 3, d: "x" }], e: null }
    const unsorted = { e: null, b: [2, { d: "x", c: 3 }], a: 1 }
    assert.strictEqual(Canonical.canonicalJson(sorted), '{"a":1,"b":[2,{"c":3,"d":"x"}],"e":null}')
    assert.strictEqual(Canonical.canonicalJson(unsorted), Canonical.canonicalJson(sorted))
    assert.strictEqual(Canonical.canonicalJson({ 9: "n", 10: "t" }), '{"10":"t","9":"n"}')
  })

  it("flat objects with keys in order (written by JSON.stringify) are the plain definition too", () => {
    const flatLeaf = fc.oneof(
      fc.string({ unit: "binary" }),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
      fc.constant(undefined),
      fc.bigInt(),
      fc.constant(() => 1),
      fc.constant(new Date(0)),
      fc.constant(Symbol("s"))
    )
    fc.assert(
      fc.property(fc.dictionary(names, flatLeaf, { maxKeys: 8 }), fc.boolean(), (dict, nullProto) => {
        const sorted: Record<string, unknown> = nullProto ? Object.create(null) : {}
        for (const k of Object.keys(dict).sort()) sorted[k] = dict[k]
        return Canonical.canonicalJson(sorted) === reference(sorted)
      }),
      { numRuns: 3000 }
    )
    // What JSON.stringify would write differently stays on the walk: a `toJSON`, a boxed string, a date.
    assert.strictEqual(Canonical.canonicalJson({ a: 1, toJSON: () => "x" }), '{"a":1}')
    assert.strictEqual(Canonical.canonicalJson(new String("ab")), '{"0":"a","1":"b"}')
    assert.strictEqual(Canonical.canonicalJson({ at: new Date(0), b: "\u2028é" }), '{"at":{},"b":"\u2028é"}')
    // A `toJSON` JSON.stringify would call though the walk never sees it: non-enumerable, or inherited.
    assert.strictEqual(
      Canonical.canonicalJson(Object.defineProperty({ a: 1 }, "toJSON", { value: () => "X", enumerable: false })),
      '{"a":1}'
    )
    Object.defineProperty(Object.prototype, "toJSON", { value: () => "P", configurable: true })
    try {
      assert.strictEqual(Canonical.canonicalJson({ a: 1 }), '{"a":1}')
    } finally {
      delete (Object.prototype as { toJSON?: unknown }).toJSON
    }
  })

  it("digests are the hex SHA-256 of the canonical form (stored digests stay valid)", () => {
    assert.strictEqual(Canonical.sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    const value = { tool: "math.add", args: { b: 1, a: "é☃" } }
    assert.strictEqual(
      Canonical.digest(value),
      createHash("sha256").update(Canonical.canonicalJson(value)).digest("hex")
    )
  })
})

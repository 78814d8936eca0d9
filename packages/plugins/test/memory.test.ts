import { assert, describe, it } from "@effect/vitest"
import { limitMemory } from "../src/internal/memory.js"

const header = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]
/** A module with one memory (flags, min, max?) exporting it as "memory" and `grow(n) -> old size`. */
const moduleWith = (limits: Array<number>) =>
  new Uint8Array([
    ...header,
    // type section: (func (param i32) (result i32))
    0x01,
    0x06,
    0x01,
    0x60,
    0x01,
    0x7f,
    0x01,
    0x7f,
    // function section: one function of type 0
    0x03,
    0x02,
    0x01,
    0x00,
    // memory section
    0x05,
    limits.length + 1,
    0x01,
    ...limits,
    // export section: "grow" func 0, "memory" memory 0
    0x07,
    0x11,
    0x02,
    0x04,
    0x67,
    0x72,
    0x6f,
    0x77,
    0x00,
    0x00,
    0x06,
    0x6d,
    0x65,
    0x6d,
    0x6f,
    0x72,
    0x79,
    0x02,
    0x00,
    // code section: local.get 0; memory.grow 0; end
    0x0a,
    0x08,
    0x01,
    0x06,
    0x00,
    0x20,
    0x00,
    0x40,
    0x00,
    0x0b
  ])

const instantiate = async (bytes: Uint8Array) => {
  const { instance } = await (
    globalThis as unknown as {
      WebAssembly: { instantiate: (b: Uint8Array) => Promise<{ instance: { exports: Record<string, unknown> } }> }
    }
  ).WebAssembly.instantiate(bytes)
  return instance.exports.grow as (pages: number) => number
}

describe("limitMemory: a ceiling on the module's own memory", () => {
  it("a memory with no maximum gets one; growing past it fails inside the module", async () => {
    const original = moduleWith([0x00, 0x01])
    assert.strictEqual(await (await instantiate(original))(100), 1)
    const limited = limitMemory(original, 8)
    assert.deepStrictEqual([limited.initialPages, limited.maxPages], [1, 8])
    const grow = await instantiate(limited.bytes)
    assert.strictEqual(grow(7), 1)
    assert.strictEqual(grow(1), -1)
  })

  it("a lower declared maximum stays; a higher one comes down; LEB128 sizes change cleanly", () => {
    assert.strictEqual(limitMemory(moduleWith([0x01, 0x01, 0x04]), 8).maxPages, 4)
    // min 1, max 300 (two-byte LEB128) down to 200 (two bytes) and to 5 (one byte)
    assert.strictEqual(limitMemory(moduleWith([0x01, 0x01, 0xac, 0x02]), 200).maxPages, 200)
    const small = limitMemory(moduleWith([0x01, 0x01, 0xac, 0x02]), 5)
    assert.strictEqual(small.maxPages, 5)
    assert.strictEqual(small.bytes.length, moduleWith([0x01, 0x01, 0xac, 0x02]).length - 1)
  })

  it("refuses what it cannot bound: not wasm, too big to start, shared or 64-bit memory, truncated", () => {
    assert.throws(() => limitMemory(new TextEncoder().encode("#!/bin/sh\necho hi\n"), 8), /not a WebAssembly module/)
    assert.throws(() => limitMemory(moduleWith([0x00, 0xac, 0x02]), 256), /needs 300 memory pages to start/)
    assert.throws(() => limitMemory(moduleWith([0x03, 0x01, 0x02]), 8), /shared memory/)
    assert.throws(() => limitMemory(moduleWith([0x04, 0x01]), 8), /64-bit memory/)
    assert.throws(() => limitMemory(moduleWith([0x00, 0x01]).subarray(0, 23), 8), /truncated section/)
  })
})

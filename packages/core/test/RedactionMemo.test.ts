/**
 * The redactor's memo of short strings found clean holds only those strings, never what they were cut
 * from: V8 makes a slice of 13+ characters point into its parent, so a memo entry taken from a tool's
 * 0.8 MB output (a `split` line, a streamed delta's `slice`) would keep the whole output alive for as
 * long as the process-wide redactor keeps the entry.
 */

import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { assert, describe, it } from "@effect/vitest"
import { Redaction } from "../src/index.js"

setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void

describe("redaction memo", () => {
  it("a short clean string cut from a big text does not keep the text in memory", () => {
    const redactor = Redaction.make()
    gc()
    const before = process.memoryUsage().heapUsed
    for (let i = 0; i < 60; i++) {
      const file = Array.from({ length: 20_000 }, (_, j) => `line ${i}:${j} ok status nominal padding`).join("\n")
      const lines = file.split("\n").slice(0, 3)
      const out = redactor.redact({ tool: "log.head", output: lines }) as { output: Array<string> }
      assert.deepStrictEqual(out.output, lines)
    }
    gc()
    gc()
    const retainedMb = (process.memoryUsage().heapUsed - before) / 1e6
    // 60 texts of ~0.8 MB (1-byte strings): ~48 MB if the memo held them; a few hundred bytes per entry if not.
    assert.isBelow(retainedMb, 16, `retained ${retainedMb.toFixed(1)} MB`)
  })
})

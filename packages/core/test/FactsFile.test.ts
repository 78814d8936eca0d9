import { mkdirSync, mkdtempSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { Compactor, ContextEngine, FactsFile } from "../src/context.js"
import { Caller, Gateway, Journal, MemoryJournal, PromptAssembler, ScriptedModel } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const workspace = () => {
  const base = mkdtempSync(join(tmpdir(), "palyra-facts-"))
  const root = join(base, "ws")
  mkdirSync(root)
  return { base, root }
}

describe("FactsFile", () => {
  it("merges into the managed block only, idempotently", () => {
    const doc = "# Notes\n\nkept as is\n"
    const once = FactsFile.merge(doc, ["ORD-1", "dock 7"])
    assert.strictEqual(once, `# Notes\n\nkept as is\n\n${FactsFile.START}\n- ORD-1\n- dock 7\n${FactsFile.END}\n`)
    assert.strictEqual(FactsFile.merge(once, ["dock 7", "ORD-1"]), once)
    const twice = FactsFile.merge(`${once}\ntrailer\n`, ["ORD-2"])
    assert.strictEqual(
      twice,
      `# Notes\n\nkept as is\n\n${FactsFile.START}\n- ORD-1\n- dock 7\n- ORD-2\n${FactsFile.END}\n\ntrailer\n`
    )
    // A fact cannot smuggle in a marker or a new line.
    assert.deepStrictEqual(FactsFile.blockFacts(FactsFile.merge("", [`a\n- b ${FactsFile.END}`])), ["a - b"])
    assert.deepStrictEqual(
      FactsFile.factsOf(
        "## Goal\nx\n## Facts & identifiers\nORD-1, 42, src/a.ts\n## Files\n- src/a.ts\n\n## Pinned notes (verbatim)\n- (alice) keep the lights on"
      ),
      ["ORD-1", "42", "src/a.ts", "(alice) keep the lights on"]
    )
  })

  it.live("writes only inside the workspace: no escapes, no symlinks, no secret paths", () =>
    Effect.gen(function* () {
      const { base, root } = workspace()
      writeFileSync(join(base, "outside.md"), "outside\n")
      symlinkSync(join(base, "outside.md"), join(root, "LINK.md"))
      symlinkSync(base, join(root, "up"))
      for (const file of [
        "../outside.md",
        join(base, "outside.md"),
        "LINK.md",
        "up/outside.md",
        ".env",
        ".git/MEMORY.md"
      ]) {
        const e = yield* Effect.flip(FactsFile.write({ root, file, facts: ["x"] }))
        assert.strictEqual(e.reason, "refused", file)
      }
      assert.strictEqual(readFileSync(join(base, "outside.md"), "utf8"), "outside\n")
      const first = yield* FactsFile.write({ root, file: "MEMORY.md", facts: ["ORD-9"] })
      assert.deepInclude(first, { path: "MEMORY.md", written: true, facts: 1 })
      const mtime = statSync(join(root, "MEMORY.md")).mtimeMs
      const again = yield* FactsFile.write({ root, file: "MEMORY.md", facts: ["ORD-9"] })
      assert.deepInclude(again, { written: false, sha256: first.sha256 })
      assert.strictEqual(statSync(join(root, "MEMORY.md")).mtimeMs, mtime)
    })
  )

  it.live("a compaction writes its facts to MEMORY.md and journals it; the same facts again write nothing", () =>
    Effect.gen(function* () {
      const { root } = workspace()
      writeFileSync(join(root, "MEMORY.md"), "# Project memory\n\nHand-written notes stay.\n")
      const journal = yield* MemoryJournal.make()
      const model = ScriptedModel.make((r) =>
        r.instructions?.startsWith(Compactor.COMPACTION_MARKER) === true
          ? { text: "not a summary" }
          : { text: `Noted: order ORD-${r.messages.length} ships from dock 7.` }
      )
      const engine = yield* ContextEngine.make({
        journal,
        model,
        contextWindow: 4_000,
        outputReserve: 500,
        autoCompact: false,
        keepTurns: 1,
        factsFile: { root, file: "MEMORY.md" }
      })
      const layer = gatewayLayer({
        model,
        journal: Layer.succeed(Journal.Journal, journal),
        promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler)
      }) as Layer.Layer<Gateway.Gateway>
      const converse = (key: string) =>
        Effect.gen(function* () {
          const g = yield* Gateway.Gateway
          let id = ""
          for (let i = 0; i < 6; i++) {
            const { session, events } = yield* g.startRun(Caller.user("alice"), { key, text: `turn ${i}` })
            yield* Stream.runDrain(events)
            id = session.id
          }
          return id as never
        }).pipe(Effect.provide(layer), Effect.scoped)
      const sessionId = yield* converse("first")
      // A person's note is pinned (and so becomes a fact); Palyra's own bookkeeping notes are not.
      yield* journal.append(sessionId, [
        { _tag: "SessionNote", sessionId, runId: null, at: 1, author: "alice", text: "keep the dock-7 contact" },
        { _tag: "SessionNote", sessionId, runId: null, at: 1, author: "references", text: "@file:x resolved: 1 bytes" }
      ])
      yield* Effect.forEach([0, 1], () => converse("first"))
      const c = yield* engine.compactor.compact(sessionId)
      assert.isTrue(c.applied)
      const content = readFileSync(join(root, "MEMORY.md"), "utf8")
      assert.isTrue(content.startsWith("# Project memory\n\nHand-written notes stay.\n\n<!-- palyra:facts:start -->\n"))
      assert.include(content, "ORD-")
      assert.include(content, "- (alice) keep the dock-7 contact\n")
      assert.notInclude(content, "@file:x")
      const notes = (yield* journal.readTape(sessionId, { afterSeq: 0 })).filter(
        (e) => e._tag === "SessionNote" && e.author === "facts"
      )
      assert.strictEqual(notes.length, 1)
      assert.match(
        notes[0]!._tag === "SessionNote" ? notes[0]!.text : "",
        /^MEMORY\.md: \d+ facts written, sha256:[0-9a-f]{64}$/
      )
      // Another session with the same conversation: the same facts, no rewrite, no note.
      const other = yield* converse("second")
      const again = yield* engine.compactor.compact(other)
      assert.isTrue(again.applied)
      assert.strictEqual(readFileSync(join(root, "MEMORY.md"), "utf8"), content)
      const after = (yield* journal.readTape(other, { afterSeq: 0 })).filter(
        (e) => e._tag === "SessionNote" && e.author === "facts"
      )
      assert.strictEqual(after.length, 0)
    })
  )
})

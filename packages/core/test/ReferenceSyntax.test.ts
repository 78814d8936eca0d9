import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { escapeText, format, parse, references, type Segment } from "../src/adapters/context/ReferenceSyntax.js"

const ref = (kind: "file" | "folder" | "url" | "run" | "session", target: string): Segment => ({
  _tag: "Reference",
  kind,
  target
})
const text = (t: string): Segment => ({ _tag: "Text", text: t })

// Strings rich in the characters the grammar cares about.
const tricky = fc.string({
  unit: fc.oneof(
    fc.constantFrom("@", "@@", "@file:", "@folder:", "@url:", "@run:", "@session:", '"', "\\", " ", ".", ")", ":"),
    fc.string({ maxLength: 3 }),
    fc.string({ unit: "grapheme", maxLength: 1 })
  ),
  maxLength: 40
})

describe("ReferenceSyntax", () => {
  it("parses each kind, quoting, escapes and sentence punctuation", () => {
    expect(parse('see @file:src/a.ts, @folder:"my docs" and @url:https://x.test/p?q=1.')).toEqual([
      text("see "),
      ref("file", "src/a.ts"),
      text(", "),
      ref("folder", "my docs"),
      text(" and "),
      ref("url", "https://x.test/p?q=1"),
      text(".")
    ])
    expect(parse("@run:01ABC (@session:01DEF)")).toEqual([
      ref("run", "01ABC"),
      text(" ("),
      ref("session", "01DEF"),
      text(")")
    ])
    expect(parse('@file:"a \\"q\\" \\\\ b"')).toEqual([ref("file", 'a "q" \\ b')])
  })

  it("leaves escapes, e-mail addresses, unknown kinds and broken quotes as text", () => {
    expect(parse('mail alice@file:x or @@file:y, @foo:bar, @file:, @file:"open')).toEqual([
      text('mail alice@file:x or @file:y, @foo:bar, @file:, @file:"open')
    ])
    expect(references("a@@b @@@file:x")).toEqual([ref("file", "x")])
  })

  it("never throws, and what it parses formats back to the same segments", () => {
    fc.assert(
      fc.property(tricky, (s) => {
        const segments = parse(s)
        expect(parse(format(segments))).toEqual(segments)
        for (const seg of segments) if (seg._tag === "Text") expect(seg.text.length).toBeGreaterThan(0)
      }),
      { numRuns: 2_000 }
    )
  })

  it("escaping round-trips: escaped text parses back to exactly itself, with no references", () => {
    fc.assert(
      fc.property(tricky, (s) => {
        expect(parse(escapeText(s))).toEqual(s.length === 0 ? [] : [text(s)])
      }),
      { numRuns: 2_000 }
    )
  })

  it("formatted references parse back to the same references", () => {
    const seg = fc.oneof(
      tricky.filter((t) => t.length > 0).map(text),
      fc
        .tuple(
          fc.constantFrom("file", "folder", "url", "run", "session" as const),
          tricky.filter((t) => t.length > 0)
        )
        .map(([k, t]) => ref(k, t))
    )
    fc.assert(
      fc.property(fc.array(seg, { maxLength: 6 }), (segments) => {
        const refs = segments.filter((s) => s._tag === "Reference")
        expect(references(format(segments))).toEqual(refs)
      }),
      { numRuns: 2_000 }
    )
  })
})

/**
 * The syntax of context references in user text: `@file:path`, `@folder:path`, `@url:https://…`,
 * `@run:<id>`, `@session:<id>`.
 *
 * - A reference starts with `@` at the start of the text or after a character that is not a letter,
 *   digit, `_`, `.` or `@` (so `alice@file:x` in an e-mail address stays text), followed by a known
 *   kind and `:`.
 * - Its target is either quoted — `@file:"my notes.md"`, with `\"` and `\\` as the only escapes — or
 *   bare: everything up to the next whitespace, less trailing sentence punctuation (`.,;:!?)]}'"`),
 *   which stays text (a bare `.` or `..` is the folder).
 * - `@@` is a literal `@` (anywhere); `@@file:x` is the text `@file:x`, not a reference.
 * - Anything else — an unknown kind, an empty target, an unterminated quote — is plain text.
 *
 * The parser is total: every string parses, nothing throws. `format` writes segments back so that
 * `parse(format(segments))` gives them again.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 @category Models */
export type ReferenceKind = "file" | "folder" | "url" | "run" | "session"

/** The kinds, in the order they are documented. @since 0.1.0 @category Constants */
export const kinds: ReadonlyArray<ReferenceKind> = ["file", "folder", "url", "run", "session"]

/** @since 0.1.0 @category Models */
export type Segment =
  | { readonly _tag: "Text"; readonly text: string }
  | { readonly _tag: "Reference"; readonly kind: ReferenceKind; readonly target: string }

const isKind = (s: string): s is ReferenceKind => (kinds as ReadonlyArray<string>).includes(s)
const boundary = /[\p{L}\p{N}_.@]/u
const trailing = new Set([".", ",", ";", ":", "!", "?", ")", "]", "}", "'", '"'])
const space = /\s/

/** Read a quoted target starting at the opening quote; `undefined` when it is not closed. */
const quoted = (s: string, open: number): { readonly target: string; readonly end: number } | undefined => {
  let out = ""
  for (let i = open + 1; i < s.length; i++) {
    const c = s[i]!
    if (c === "\\" && (s[i + 1] === '"' || s[i + 1] === "\\")) {
      out += s[i + 1]
      i++
    } else if (c === '"') {
      return { target: out, end: i + 1 }
    } else {
      out += c
    }
  }
  return undefined
}

/**
 * Split user text into text and references (see the module notes). Never throws.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const parse = (s: string): Array<Segment> => {
  const out: Array<Segment> = []
  let text = ""
  const flush = () => {
    if (text.length > 0) out.push({ _tag: "Text", text })
    text = ""
  }
  let i = 0
  while (i < s.length) {
    const c = s[i]!
    if (c !== "@") {
      text += c
      i++
      continue
    }
    if (s[i + 1] === "@") {
      text += "@"
      i += 2
      continue
    }
    const prev = i === 0 ? undefined : s[i - 1]!
    const colon = s.indexOf(":", i + 1)
    const kind = colon > i ? s.slice(i + 1, colon) : ""
    // `prev` is the raw character before: an escaped `@@` before this `@` also counts as a boundary.
    const atBoundary = prev === undefined || !boundary.test(prev) || (prev === "@" && s[i - 2] === "@")
    if (!atBoundary || !isKind(kind)) {
      text += c
      i++
      continue
    }
    const start = colon + 1
    if (s[start] === '"') {
      const q = quoted(s, start)
      if (q !== undefined && q.target.length > 0) {
        flush()
        out.push({ _tag: "Reference", kind, target: q.target })
        i = q.end
        continue
      }
      text += c
      i++
      continue
    }
    let end = start
    while (end < s.length && !space.test(s[end]!)) end++
    const full = end
    while (end > start && trailing.has(s[end - 1]!)) end--
    // `.` and `..` are folders, not punctuation.
    if (end === start && /^\.{1,2}$/.test(s.slice(start, full))) end = full
    const target = s.slice(start, end)
    // A bare target containing `@` would not survive `format`'s escaping: such targets are quoted.
    if (target.length === 0 || target.includes("@") || target.startsWith('"')) {
      text += c
      i++
      continue
    }
    flush()
    out.push({ _tag: "Reference", kind, target })
    i = end
  }
  flush()
  return out
}

/** Text made literal: every `@` doubled. @since 0.1.0 @category Formatting */
export const escapeText = (text: string): string => text.replaceAll("@", "@@")

const needsQuotes = (target: string) => /[\s"\\@]/.test(target) || trailing.has(target[target.length - 1] ?? "")

/** Whether text after a bare target ends it where it should: only sentence punctuation before a space. */
const endsBare = (text: string, last: boolean) => {
  for (const c of text) {
    if (space.test(c)) return true
    if (!trailing.has(c)) return false
  }
  return last
}

/**
 * Write segments back as user text: text escaped, references bare when that parses back the same,
 * quoted otherwise.
 *
 * @since 0.1.0
 * @category Formatting
 */
export const format = (segments: ReadonlyArray<Segment>): string => {
  let out = ""
  segments.forEach((seg, i) => {
    if (seg._tag === "Text") {
      out += escapeText(seg.text)
      return
    }
    // Bare only when the next text cannot run on into the target.
    const next = segments[i + 1]
    const bare =
      !needsQuotes(seg.target) &&
      (next === undefined || (next._tag === "Text" && endsBare(next.text, segments[i + 2] === undefined)))
    const target = bare ? seg.target : `"${seg.target.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`
    // A reference right after a word character would not start at a boundary: keep them apart.
    const last = out[out.length - 1]
    if (last !== undefined && boundary.test(last) && !out.endsWith("@@")) out += " "
    out += `@${seg.kind}:${target}`
  })
  return out
}

/**
 * The references of a text, in order.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const references = (s: string): Array<Extract<Segment, { _tag: "Reference" }>> =>
  parse(s).filter((x): x is Extract<Segment, { _tag: "Reference" }> => x._tag === "Reference")

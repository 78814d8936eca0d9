/**
 * Mention and broadcast matching on identifier boundaries.
 *
 * A pattern such as `@bot` matches only where it stands as a word of its own: `hi @bot`, `@bot,
 * help`, `(@bot)` match; `me@bot.example`, `@bots`, `@bot_two` and `x@bot` do not. A boundary is
 * the text's start or end or a character that cannot continue an identifier; `.`, `-` and `@` count
 * as continuing it when a letter or digit follows (so `@bot.example` is a domain, `@bot.` is a
 * sentence's end). Matching is case-insensitive (Unicode-aware).
 *
 * @since 0.1.0
 */

const WORD = /[\p{L}\p{N}\p{M}_]/u
const JOINER = /[.\-@+]/

const isWord = (c: string | undefined) => c !== undefined && WORD.test(c)

/** Whether the character at `i - 1` (before a match) allows the match to start there. */
const startsAt = (text: string, i: number) => {
  const before = text[i - 1]
  if (before === undefined) return true
  return !isWord(before) && !JOINER.test(before)
}

/** Whether the match may end at `end` (exclusive). */
const endsAt = (text: string, end: number) => {
  const after = text[end]
  if (after === undefined) return true
  if (isWord(after)) return false
  return !(JOINER.test(after) && isWord(text[end + 1]))
}

/**
 * Every index where `pattern` occurs in `text` on identifier boundaries.
 *
 * @since 0.1.0
 * @category Matching
 */
export const occurrences = (text: string, pattern: string): ReadonlyArray<number> => {
  if (pattern.length === 0) return []
  const haystack = text.toLowerCase()
  const needle = pattern.toLowerCase()
  // Lower-casing can change a string's length (rare code points); fall back to exact case then.
  const [h, n] =
    haystack.length === text.length && needle.length === pattern.length ? [haystack, needle] : [text, pattern]
  const found: Array<number> = []
  for (let i = h.indexOf(n); i !== -1; i = h.indexOf(n, i + 1)) {
    if (startsAt(text, i) && endsAt(text, i + n.length)) found.push(i)
  }
  return found
}

/** Whether any pattern occurs in `text` on identifier boundaries. @since 0.1.0 @category Matching */
export const matchesAny = (text: string, patterns: ReadonlyArray<string>): boolean =>
  patterns.some((p) => occurrences(text, p).length > 0)

/** The broadcast mentions that address everyone in a conversation. @since 0.1.0 @category Constants */
export const BROADCASTS: ReadonlyArray<string> = ["@everyone", "@here", "@channel", "@all"]

/** Whether `text` holds a broadcast mention. @since 0.1.0 @category Matching */
export const hasBroadcast = (text: string): boolean => matchesAny(text, BROADCASTS)

/**
 * `text` with every occurrence of the given patterns (on boundaries) removed and the whitespace
 * around them collapsed.
 *
 * @since 0.1.0
 * @category Rewriting
 */
export const strip = (text: string, patterns: ReadonlyArray<string>): string => {
  const cuts: Array<readonly [number, number]> = []
  for (const p of patterns) for (const i of occurrences(text, p)) cuts.push([i, i + p.length])
  if (cuts.length === 0) return text
  cuts.sort((a, b) => a[0] - b[0])
  let out = ""
  let from = 0
  for (const [start, end] of cuts) {
    if (start < from) continue
    out += text.slice(from, start)
    from = end
  }
  out += text.slice(from)
  return out.replace(/[ \t]{2,}/g, " ").trim()
}

/** `text` without broadcast mentions. @since 0.1.0 @category Rewriting */
export const stripBroadcasts = (text: string): string => strip(text, BROADCASTS)

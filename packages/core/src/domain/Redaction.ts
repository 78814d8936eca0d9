/**
 * Redaction: secrets never reach disk. A redactor walks a JSON value and replaces
 *
 * - the value of any field whose name says it holds a secret (`api_key`, `token`, `password`,
 *   `authorization`, `secret`, `cookie`, `private_key`, …),
 * - any substring that looks like a credential: provider API keys, JWTs, PEM private keys,
 *   AWS/GitHub/GitLab/Slack/Google/Stripe/Hugging Face/npm tokens, credentials in URLs, and values
 *   introduced by a keyword (`authorization: bearer …`, `Bearer …`, `password=…`, `"api_key": "…"`),
 * - any configured literal secret (e.g. the values of your API-key environment variables)
 *
 * with a marker naming what was removed, e.g. `[REDACTED:bearer-token]`. The secret itself is not
 * kept anywhere.
 *
 * Keywords and header names match in any case (`Bearer`, `bearer`, `AUTHORIZATION`), because the
 * formats they introduce are case-insensitive; provider prefixes stay exact (`ghp_`, `AKIA`, `sk-`),
 * because their case is what tells a key from a word.
 *
 * The walk is iterative (no recursion, so no stack overflow on hostile nesting). Containers nested
 * deeper than `maxDepth` are replaced whole by `[REDACTED:too-deep]`, containers that would push the
 * walk past `maxNodes` values by `[REDACTED:too-large]`: nothing is ever kept unexamined.
 *
 * Text that arrives in pieces (a model's streamed answer) goes through {@link streaming}, which holds
 * back just enough of the tail that no secret can be split across two emitted pieces.
 *
 * @since 0.1.0
 */
import { Context } from "effect"

// =============================================================================================
// Models
// =============================================================================================

/**
 * A value pattern. Every match is replaced by `[REDACTED:<label>]`.
 *
 * @since 0.1.0
 * @category Models
 */
export interface Pattern {
  readonly label: string
  /** What to remove (made global if it is not). */
  readonly pattern: RegExp
  /**
   * Needed only when a match can contain whitespace: matches (anchored with `$`) the end of the text
   * that may stand before such a match, e.g. `/\bbearer[ \t]*$/i`. The streaming redactor holds back
   * text that ends this way. It is tried against the last 256 characters.
   */
  readonly introducer?: RegExp | undefined
}

/** @since 0.1.0 @category Models */
export interface RedactionOptions {
  /** Field names (case-insensitive, `-`/`_` ignored) whose values are always secret. Added to the defaults. */
  readonly secretKeys?: ReadonlyArray<string> | undefined
  /** Extra value patterns. Added to the defaults. */
  readonly patterns?: ReadonlyArray<Pattern> | undefined
  /** Exact secret strings to remove wherever they appear (at least 8 characters each). */
  readonly literals?: ReadonlyArray<string> | undefined
  /** Containers nested deeper than this are replaced by `[REDACTED:too-deep]` (default 64). */
  readonly maxDepth?: number | undefined
  /** A container that would take the walk past this many values is replaced by `[REDACTED:too-large]` (default 1,000,000). */
  readonly maxNodes?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface StreamingOptions {
  /**
   * The most text held back (default 4,096 characters). A held-back unit that grows past it is
   * emitted only as a marker.
   */
  readonly maxHoldBack?: number | undefined
}

/**
 * Redacts one message that arrives in pieces. Feed every piece to `push`, emit what it returns (it
 * may be `""`), and call `flush` at the end of the message. The concatenation of everything emitted
 * equals `redactString` of the whole message (except past `maxHoldBack`, see {@link streaming}).
 *
 * @since 0.1.0
 * @category Models
 */
export interface StreamingRedactor {
  /** Take the next piece; returns the text that is now safe to emit, already redacted. */
  readonly push: (chunk: string) => string
  /** The message ended: returns the rest, redacted. The redactor is then ready for a new message. */
  readonly flush: () => string
}

/** @since 0.1.0 @category Models */
export interface Redactor {
  /** A redacted deep copy (the input is not modified). */
  readonly redact: <A>(value: A) => A
  readonly redactString: (text: string) => string
  /** A new streaming redactor with the same rules, for one message that arrives in pieces. */
  readonly streaming: (options?: StreamingOptions) => StreamingRedactor
}

// =============================================================================================
// Rules
// =============================================================================================

/** The marker that replaces a container nested deeper than `maxDepth`. @since 0.1.0 @category Markers */
export const TOO_DEEP = "[REDACTED:too-deep]"
/** The marker that replaces a container past the `maxNodes` budget. @since 0.1.0 @category Markers */
export const TOO_LARGE = "[REDACTED:too-large]"
/** The marker the streaming redactor emits for a held-back unit longer than `maxHoldBack`. @since 0.1.0 @category Markers */
export const TOO_LONG = "[REDACTED:too-long]"

const marker = (label: string) => `[REDACTED:${label}]`

// Field names whose redaction the walk remembers (per redactor) before it starts over.
const KEY_MEMO = 1024
/** Longest field name the per-redactor memo keeps (longer names are decided each time). */
const KEY_MEMO_MAX_LENGTH = 64

const DEFAULT_SECRET_KEYS = [
  "apikey",
  "apisecret",
  "token",
  "accesstoken",
  "refreshtoken",
  "idtoken",
  "authtoken",
  "sessiontoken",
  "password",
  "passwd",
  "pwd",
  "passphrase",
  "secret",
  "clientsecret",
  "secretkey",
  "privatekey",
  "authorization",
  "proxyauthorization",
  "cookie",
  "setcookie",
  "xapikey",
  "credentials"
]

// Keywords whose `=`/`:` introduces a secret value (`DB_PASSWORD=…`, `"api_key": "…"`, `token: …`).
const ASSIGNMENT_KEYWORDS =
  "api[_-]?key|secret|passw(?:or)?d|token|access[_-]?key|private[_-]?key|(?:set-)?cookie|credentials?"
// `["']?  =|:  ["']?` with at most 16 blanks on each side (bounded, so the streaming hold-back is too).
const ASSIGN = String.raw`["']?[ \t]{0,16}[=:][ \t]{0,16}["']?`
// A value that is code or a type rather than a secret, when it is the whole value: a call, index or
// generic (`getToken(session)`, `tokens[0]`, `Redacted<string>`), a dotted name without digits
// (`process.env.API_KEY`, `os.environ[`), a type or constant (`string`, `undefined`, `None`), a
// template (`${…}`, `{{…}}`, `<…>`) or a marker. A bare dotted name counts as code only without
// digits, which a random secret almost always has.
const CODE_VALUE = String.raw`(?:[A-Za-z_$][\w$.]*(?:\([^\s"',;]*\)|\[[^\s"',;]*\]|<[^\s"',;]*>)[)\]}]*(?![^\s"',;])|[A-Za-z_$]+(?:\.[A-Za-z_$]+)+(?![^\s"',;)\]}(\[])|(?:string|number|boolean|bigint|symbol|undefined|null|unknown|never|object|true|false|none|nil|required|optional)(?![^\s"',;)\]}|\[<])|\$\{|\{\{|<|\[REDACTED)`

const PEM_BEGIN = "-----BEGIN [A-Z0-9 ]{0,64}PRIVATE KEY(?: BLOCK)?-----"
const PEM_END = "-----END [A-Z0-9 ]{0,64}PRIVATE KEY(?: BLOCK)?-----"

/**
 * The built-in value patterns, in the order they are applied.
 *
 * @since 0.1.0
 * @category Rules
 */
export const defaultPatterns: ReadonlyArray<Pattern> = [
  {
    label: "private-key",
    pattern: new RegExp(String.raw`${PEM_BEGIN}[\s\S]*?(?:${PEM_END}|$)`, "g"),
    introducer: /-----BEGIN[A-Z0-9 ]{0,64}$/
  },
  {
    // The header's value, scheme included: `Authorization: Bearer …`, `"authorization": "Basic …"`.
    label: "authorization",
    pattern: new RegExp(
      String.raw`(?<=\bauthorization${ASSIGN})(?!${CODE_VALUE})(?:[A-Za-z][\w-]{0,31}[ \t]{1,16})?[^\s"',;]{6,}`,
      "gi"
    ),
    introducer: /authorization["']?[ \t]{0,16}(?:[=:][ \t]{0,16}["']?(?:[A-Za-z][\w-]{0,31}[ \t]{1,16})?)?$/i
  },
  {
    // A scheme and a token (RFC 6750 `b64token`) with a digit, `+`, `/` or `=` in it, so that prose
    // such as "Basic understanding" or "Token verification" is left alone.
    label: "bearer-token",
    pattern: /\b(?:bearer|basic|token)[ \t]{1,16}(?=[\w.~-]*[0-9+/=])[\w.~+/-]{12,}=*/gi,
    introducer: /(?:bearer|basic|token)[ \t]{0,16}$/i
  },
  { label: "jwt", pattern: /\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}/g },
  { label: "anthropic-key", pattern: /\bsk-ant-[\w-]{16,}/g },
  { label: "openai-key", pattern: /\bsk-(?:proj-|svcacct-|admin-)?[\w-]{20,}/g },
  { label: "stripe-key", pattern: /\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}/g },
  { label: "aws-access-key", pattern: /\b(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])/g },
  { label: "github-token", pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,})/g },
  { label: "gitlab-token", pattern: /\bglpat-[\w-]{20,}/g },
  { label: "slack-token", pattern: /\bxox[abposr]-[A-Za-z0-9-]{10,}/g },
  { label: "google-api-key", pattern: /\bAIza[\w-]{35}(?![\w-])/g },
  { label: "huggingface-token", pattern: /\bhf_[A-Za-z0-9]{30,}/g },
  { label: "npm-token", pattern: /\bnpm_[A-Za-z0-9]{36}(?![A-Za-z0-9])/g },
  { label: "url-credentials", pattern: /(?<=[a-z][a-z0-9+.-]*:\/\/[^/\s:@]{1,64}:)[^@\s/]{4,}(?=@)/gi },
  {
    label: "secret-assignment",
    pattern: new RegExp(String.raw`(?<=(?:${ASSIGNMENT_KEYWORDS})${ASSIGN})(?!${CODE_VALUE})[^\s"',;]{6,}`, "gi"),
    introducer: new RegExp(String.raw`(?:${ASSIGNMENT_KEYWORDS})["']?[ \t]{0,16}(?:[=:][ \t]{0,16}["']?)?$`, "i")
  }
]

// The cheap pre-check: a string none of whose triggers occurs matches no default pattern (each
// default pattern contains one of these). Most strings stop here. The keywords of the patterns that
// match in any case (`/i`) are one case-insensitive scan; the provider prefixes, which the patterns
// match case-sensitively, are found case-sensitively and mostly by `includes` behind the one
// character each group needs (`_`, `-`): one `/i` regex over both sets measured 1.0 µs per typical
// 200-character tool output (its short alternatives defeat the regex engine's lookahead), this 0.6.
const KEYWORD_TRIGGER =
  /bearer|basic|token|authorization|api[_-]?key|secret|passw|access[_-]?key|private[_-]?key|cookie|credential/i
const UNDERSCORE_TRIGGER = /[spr]k_|gh[pousr]_|github_pat_|hf_|npm_/
const DASH_TRIGGER = /sk-|glpat-/
const A_TRIGGER = /A(?:KIA|SIA|Iza)/
const mayMatchDefault = (text: string): boolean =>
  (text.includes("_") && UNDERSCORE_TRIGGER.test(text)) ||
  (text.includes("-") && DASH_TRIGGER.test(text)) ||
  A_TRIGGER.test(text) ||
  text.includes("xox") ||
  text.includes("eyJ") ||
  text.includes("PRIVATE KEY") ||
  text.includes("://") ||
  KEYWORD_TRIGGER.test(text)

// A string that holds its own characters (at most `text.length + 1`), not a view into a parent string:
// the concatenation flattens into a fresh sequential string, and the slice points into that.
const ownCopy = (text: string): string => ` ${text}`.slice(1)

const PEM_BEGIN_RE = new RegExp(PEM_BEGIN, "g")
const PEM_END_RE = new RegExp(PEM_END, "g")

const normalizeKey = (key: string) => key.toLowerCase().replace(/[-_\s.]/g, "")
const isSpace = (c: string | undefined) => c !== undefined && /\s/.test(c)
const withFlags = (re: RegExp, add: string, remove = "") => {
  let flags = re.flags
  for (const f of remove) flags = flags.replace(f, "")
  for (const f of add) if (!flags.includes(f)) flags += f
  return new RegExp(re.source, flags)
}

interface Rules {
  readonly introducers: ReadonlyArray<RegExp>
  /** Literals that contain whitespace: the only ones a cut between two runs can split. */
  readonly spacedLiterals: ReadonlyArray<string>
  readonly longestLiteral: number
  readonly redactString: (text: string) => string
}

// =============================================================================================
// Constructors
// =============================================================================================

/** @since 0.1.0 @category Constructors */
export const make = (options: RedactionOptions = {}): Redactor => {
  const maxDepth = options.maxDepth ?? 64
  const maxNodes = options.maxNodes ?? 1_000_000
  const keys = new Set([...DEFAULT_SECRET_KEYS, ...(options.secretKeys ?? []).map(normalizeKey)])
  const custom = (options.patterns ?? []).map((p) => ({ ...p, test: withFlags(p.pattern, "", "gy") }))
  const all = [...defaultPatterns, ...custom]
  const patterns = all.map((p) => ({ replace: withFlags(p.pattern, "g", "y"), marker: marker(p.label) }))
  const literals = [...new Set(options.literals ?? [])].filter((l) => l.length >= 8).sort((a, b) => b.length - a.length)
  // Every default pattern needs at least 8 characters; a custom one may need fewer.
  const minLength = custom.length > 0 ? 1 : 8

  const isSecretKey = (key: string) => {
    const k = normalizeKey(key)
    if (keys.has(k)) return true
    // Suffix forms: github_token, db_password, stripe_secret_key, openai_api_key, …
    for (const s of ["apikey", "token", "password", "secret", "secretkey", "privatekey"]) {
      if (k.endsWith(s) && k !== "tokens" && !k.endsWith("maxtoken") && !k.endsWith("tokencount")) return true
    }
    return false
  }
  // What the walk decides about a field name depends on the name alone (both functions are pure for
  // fixed rules), and the same few names recur in every event: decided once per name, in a bounded
  // memo (cleared when full, so hostile input can only cost the work it would have cost anyway).
  // Only short names the redactor leaves alone are kept: a long name (arbitrary JSON keys from tool
  // arguments and results) would pin its memory, and a name holding a secret must not outlive its event.
  interface KeyRule {
    readonly redacted: string
    readonly secret: boolean
    readonly marker: string
  }
  const keyRules = new Map<string, KeyRule>()
  const keyRule = (k: string): KeyRule => {
    let rule = keyRules.get(k)
    if (rule === undefined) {
      rule = { redacted: redactString(k), secret: isSecretKey(k), marker: marker(normalizeKey(k)) }
      if (k.length <= KEY_MEMO_MAX_LENGTH && rule.redacted === k) {
        if (keyRules.size >= KEY_MEMO) keyRules.clear()
        keyRules.set(k, rule)
      }
    }
    return rule
  }

  // Short strings found clean (identifiers, event kinds, tool names recur in every event): each
  // check costs ~0.1 µs even when it finds nothing, a lookup a fraction of it. Bounded and cleared
  // when full like the field names' memo; only text left unchanged is kept (never a secret).
  const cleanShort = new Set<string>()
  const redactString = (text: string): string => {
    if (text.length < minLength) return text
    const short = text.length <= KEY_MEMO_MAX_LENGTH
    if (short && cleanShort.has(text)) return text
    const literal = literals.some((l) => text.includes(l))
    if (!literal && !mayMatchDefault(text) && !custom.some((p) => p.test.test(text))) {
      if (short) {
        if (cleanShort.size >= KEY_MEMO) cleanShort.clear()
        // A copy of its own: `text` may be a slice of a big string (a line of a tool's output, a
        // streamed delta's piece), which V8 keeps alive for as long as the slice is.
        cleanShort.add(ownCopy(text))
      }
      return text
    }
    let out = text
    if (literal) for (const l of literals) if (out.includes(l)) out = out.split(l).join(marker("configured"))
    for (const p of patterns) out = out.replace(p.replace, p.marker)
    return out
  }

  // ---- the walk: an explicit stack instead of recursion ----
  interface Frame {
    readonly source: ReadonlyArray<unknown> | Readonly<Record<string, unknown>>
    readonly target: Array<unknown> | Record<string, unknown>
    /** `undefined` for arrays. */
    readonly keys: ReadonlyArray<string> | undefined
    readonly depth: number
    next: number
  }
  const put = (target: Record<string, unknown>, key: string, value: unknown) => {
    // `__proto__` as a plain assignment would set the copy's prototype instead of a field.
    if (key === "__proto__")
      Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
    else target[key] = value
  }
  const redact = <A>(root: A): A => {
    let budget = maxNodes
    const stack: Array<Frame> = []
    const enter = (value: unknown, depth: number): unknown => {
      if (typeof value === "string") return redactString(value)
      if (value === null || typeof value !== "object") return value
      if (depth > maxDepth) return TOO_DEEP
      if (Array.isArray(value)) {
        if (budget < value.length + 1) return TOO_LARGE
        budget -= value.length + 1
        const target = new Array<unknown>(value.length)
        stack.push({ source: value, target, keys: undefined, depth, next: 0 })
        return target
      }
      const keys = Object.keys(value)
      if (budget < keys.length + 1) return TOO_LARGE
      budget -= keys.length + 1
      const target: Record<string, unknown> = {}
      stack.push({ source: value as Record<string, unknown>, target, keys, depth, next: 0 })
      return target
    }
    const out = enter(root, 0)
    while (stack.length > 0) {
      const frame = stack[stack.length - 1]!
      const i = frame.next++
      if (frame.keys === undefined) {
        const source = frame.source as ReadonlyArray<unknown>
        if (i >= source.length) stack.pop()
        else (frame.target as Array<unknown>)[i] = enter(source[i], frame.depth + 1)
        continue
      }
      if (i >= frame.keys.length) {
        stack.pop()
        continue
      }
      const k = frame.keys[i]!
      const v = (frame.source as Readonly<Record<string, unknown>>)[k]
      const target = frame.target as Record<string, unknown>
      const rule = keyRule(k)
      let key = rule.redacted
      if (key !== k && Object.hasOwn(target, key)) {
        let n = 2
        while (Object.hasOwn(target, `${key}#${n}`)) n++
        key = `${key}#${n}`
      }
      const secret = rule.secret && v !== null && v !== undefined && v !== "" && typeof v !== "boolean"
      put(target, key, secret ? rule.marker : enter(v, frame.depth + 1))
    }
    return out as A
  }

  const rules: Rules = {
    introducers: all.flatMap((p) => (p.introducer ? [withFlags(p.introducer, "", "gy")] : [])),
    spacedLiterals: literals.filter((l) => /\s/.test(l)),
    longestLiteral: literals[0]?.length ?? 0,
    redactString
  }
  return { redact, redactString, streaming: (o) => makeStreaming(rules, o ?? {}) }
}

/** A redactor with the default rules. @since 0.1.0 @category Constructors */
export const defaultRedactor: Redactor = make()

/**
 * A redactor that changes nothing (redaction turned off). @since 0.1.0 @category Constructors
 */
export const none: Redactor = {
  redact: (value) => value,
  redactString: (text) => text,
  streaming: () => ({ push: (chunk) => chunk, flush: () => "" })
}

// =============================================================================================
// Streaming
// =============================================================================================

const WINDOW = 256

/**
 * A streaming redactor for one message that arrives in pieces: `redactor.streaming(options)`.
 *
 * **The bound.** Text is emitted only up to a *cut*: a position right after whitespace such that
 * no default or configured pattern can match across it. What is held back is therefore the trailing
 * unit of the text:
 *
 * - the trailing run of non-whitespace (every secret without whitespace lies inside one run), and
 *   before it, repeatedly, any run that ends with an introducing keyword (`authorization:`,
 *   `Bearer`, `password =`, a pattern's `introducer`) together with the whitespace after it;
 * - an unterminated PEM private-key block, from its `-----BEGIN`;
 * - a configured literal that contains whitespace, while it may still be completed.
 *
 * At most `maxHoldBack` characters (default 4,096) are held. A unit that grows past the cap is
 * never emitted in clear: it is replaced, through to its end, by one `[REDACTED:too-long]` (or
 * `[REDACTED:private-key]` for a key block, dropped through its `-----END` line).
 *
 * Patterns whose matches may contain whitespace are covered only through their `introducer`.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const streaming = (redactor: Redactor, options?: StreamingOptions): StreamingRedactor =>
  redactor.streaming(options)

/** Where the run of non-whitespace that contains (or starts at) `i` begins. */
const runStart = (text: string, i: number) => {
  let j = i
  while (j > 0 && !isSpace(text[j - 1])) j--
  return j
}

interface Span {
  readonly start: number
  /** Exclusive; `Infinity` while unterminated. */
  readonly end: number
}

/** PEM private-key blocks, each from its BEGIN line through its END line (or open-ended). */
const pemSpans = (text: string): ReadonlyArray<Span> => {
  if (!text.includes("-----BEGIN")) return []
  const spans: Array<Span> = []
  PEM_BEGIN_RE.lastIndex = 0
  let begin = PEM_BEGIN_RE.exec(text)
  while (begin !== null) {
    PEM_END_RE.lastIndex = begin.index + begin[0].length
    const end = PEM_END_RE.exec(text)
    if (end === null) {
      spans.push({ start: begin.index, end: Number.POSITIVE_INFINITY })
      break
    }
    spans.push({ start: begin.index, end: end.index + end[0].length })
    PEM_BEGIN_RE.lastIndex = end.index + end[0].length
    begin = PEM_BEGIN_RE.exec(text)
  }
  return spans
}

/** Occurrences of whitespace-bearing literals, plus one that the text's end may still complete. */
const literalSpans = (text: string, literals: ReadonlyArray<string>): ReadonlyArray<Span> => {
  const spans: Array<Span> = []
  for (const l of literals) {
    for (let i = text.indexOf(l); i >= 0; i = text.indexOf(l, i + 1)) spans.push({ start: i, end: i + l.length })
    // The longest suffix of the text that begins the literal (earliest start first).
    for (let i = Math.max(0, text.length - l.length + 1); i < text.length; i++) {
      if (text.charCodeAt(i) === l.charCodeAt(0) && l.startsWith(text.slice(i))) {
        spans.push({ start: i, end: Number.POSITIVE_INFINITY })
        break
      }
    }
  }
  return spans
}

const makeStreaming = (rules: Rules, options: StreamingOptions): StreamingRedactor => {
  const cap = Math.max(1, options.maxHoldBack ?? 4096)
  // What a dropped unit keeps as context: enough for introducers and whitespace-bearing literals.
  const keep = Math.max(WINDOW, rules.longestLiteral)

  /** If a cut at `c` (right after whitespace, or 0) could split a match, an earlier candidate. */
  const blocked = (text: string, c: number, spans: ReadonlyArray<Span>): number | undefined => {
    if (c === 0) return undefined
    const from = Math.max(0, c - WINDOW)
    const window = text.slice(from, c)
    for (const re of rules.introducers) {
      const m = re.exec(window)
      if (m !== null) return runStart(text, from + m.index)
    }
    for (const s of spans) if (s.start < c && c < s.end) return runStart(text, s.start)
    return undefined
  }
  const spansOf = (text: string) => [...pemSpans(text), ...literalSpans(text, rules.spacedLiterals)]

  /** The last safe cut: everything before it can be redacted and emitted now. */
  const lastCut = (text: string): number => {
    const spans = spansOf(text)
    let c = text.length === 0 || isSpace(text[text.length - 1]) ? text.length : runStart(text, text.length)
    for (let b = blocked(text, c, spans); b !== undefined; b = blocked(text, c, spans)) c = b
    return c
  }

  /** The first safe cut after position 0 (where a dropped unit ends), if any. */
  const firstCut = (text: string): number | undefined => {
    const spans = spansOf(text)
    for (let c = 1; c <= text.length; c++) {
      if (isSpace(text[c - 1]) && !isSpace(text[c]) && blocked(text, c, spans) === undefined) return c
    }
    return undefined
  }

  let pending = ""
  let dropping: "no" | "unit" | "pem" = "no"

  /** Leave drop mode once the dropped unit has ended; false while it goes on. */
  const endDrop = (): boolean => {
    if (dropping === "pem") {
      PEM_END_RE.lastIndex = 0
      const end = PEM_END_RE.exec(pending)
      if (end === null) {
        pending = pending.slice(-keep)
        return false
      }
      pending = pending.slice(end.index + end[0].length)
    } else if (dropping === "unit") {
      let cut = firstCut(pending)
      if (cut === undefined) {
        pending = pending.slice(-keep)
        return false
      }
      // Keep the whitespace that ended the dropped unit.
      while (cut > 0 && isSpace(pending[cut - 1])) cut--
      pending = pending.slice(cut)
    }
    dropping = "no"
    return true
  }

  const push = (chunk: string): string => {
    pending += chunk
    if (dropping !== "no" && !endDrop()) return ""
    const cut = lastCut(pending)
    const out = cut > 0 ? rules.redactString(pending.slice(0, cut)) : ""
    pending = pending.slice(cut)
    if (pending.length <= cap) return out
    // The held-back unit outgrew the cap: emit it only as a marker, and drop it through its end.
    const pem = pemSpans(pending).some((s) => s.end === Number.POSITIVE_INFINITY)
    dropping = pem ? "pem" : "unit"
    pending = pending.slice(-keep)
    return out + (pem ? marker("private-key") : TOO_LONG)
  }

  const flush = (): string => {
    const rest = dropping === "no" || endDrop() ? pending : ""
    pending = ""
    dropping = "no"
    return rules.redactString(rest)
  }

  return { push, flush }
}

// =============================================================================================
// Services
// =============================================================================================

/**
 * The redactor the kernel applies to text it emits before the journal stores it (e.g. streamed
 * assistant text). Provide one built with the same options as the journal's
 * (`Layer.succeed(CurrentRedactor, Redaction.make(options))`); the default has the default rules.
 *
 * @since 0.1.0
 * @category Services
 */
export class CurrentRedactor extends Context.Reference<CurrentRedactor>()("@palyra/core/Redaction/CurrentRedactor", {
  defaultValue: (): Redactor => defaultRedactor
}) {}

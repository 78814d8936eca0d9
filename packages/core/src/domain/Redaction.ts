/**
 * Redaction: secrets never reach disk. A redactor walks a JSON value and replaces
 *
 * - the value of any field whose name says it holds a secret (`api_key`, `token`, `password`,
 *   `authorization`, `secret`, `cookie`, `private_key`, …), and
 * - any substring that looks like a credential (provider API keys, bearer tokens, JWTs, PEM private
 *   keys, AWS/GitHub/Slack/Google/Stripe keys), and
 * - any configured literal secret (e.g. the values of your API-key environment variables)
 *
 * with a marker naming what was removed, e.g. `[REDACTED:bearer-token]`. The secret itself is not
 * kept anywhere.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 @category Models */
export interface RedactionOptions {
  /** Field names (case-insensitive, `-`/`_` ignored) whose values are always secret. Added to the defaults. */
  readonly secretKeys?: ReadonlyArray<string> | undefined
  /** Extra value patterns, each with a label for the marker. Added to the defaults. */
  readonly patterns?: ReadonlyArray<{ readonly label: string; readonly pattern: RegExp }> | undefined
  /** Exact secret strings to remove wherever they appear (at least 8 characters each). */
  readonly literals?: ReadonlyArray<string> | undefined
}

/** @since 0.1.0 @category Models */
export interface Redactor {
  /** A redacted deep copy (the input is not modified). */
  readonly redact: <A>(value: A) => A
  readonly redactString: (text: string) => string
}

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

const DEFAULT_PATTERNS: ReadonlyArray<{ readonly label: string; readonly pattern: RegExp }> = [
  {
    label: "private-key",
    pattern: /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)/g
  },
  { label: "bearer-token", pattern: /\b(?:Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{12,}/g },
  { label: "jwt", pattern: /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g },
  { label: "anthropic-key", pattern: /\bsk-ant-[A-Za-z0-9_-]{16,}/g },
  { label: "openai-key", pattern: /\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}/g },
  { label: "stripe-key", pattern: /\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}/g },
  { label: "aws-access-key", pattern: /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/g },
  { label: "github-token", pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})/g },
  { label: "slack-token", pattern: /\bxox[abposr]-[A-Za-z0-9-]{10,}/g },
  { label: "google-api-key", pattern: /\bAIza[0-9A-Za-z_-]{35}\b/g },
  { label: "url-credentials", pattern: /(?<=[a-z][a-z0-9+.-]*:\/\/[^/\s:@]{1,64}:)[^@\s/]{4,}(?=@)/gi },
  {
    label: "secret-assignment",
    pattern: /(?<=\b(?:api[_-]?key|secret|password|passwd|token|access[_-]?key)\s*[=:]\s*["']?)[^\s"',;]{6,}/gi
  }
]

const normalizeKey = (key: string) => key.toLowerCase().replace(/[-_\s.]/g, "")

/** @since 0.1.0 @category Constructors */
export const make = (options: RedactionOptions = {}): Redactor => {
  const keys = new Set([...DEFAULT_SECRET_KEYS, ...(options.secretKeys ?? []).map(normalizeKey)])
  const patterns = [...DEFAULT_PATTERNS, ...(options.patterns ?? [])].map(({ label, pattern }) => ({
    label,
    pattern: pattern.global ? pattern : new RegExp(pattern.source, `${pattern.flags}g`)
  }))
  const literals = (options.literals ?? []).filter((l) => l.length >= 8).sort((a, b) => b.length - a.length)
  // One combined test first: most strings hold no secret, and one regex pass is much cheaper than many.
  const anyPattern = new RegExp(patterns.map((p) => `(?:${p.pattern.source})`).join("|"), "i")
  const isSecretKey = (key: string) => {
    const k = normalizeKey(key)
    if (keys.has(k)) return true
    // Suffix forms: github_token, db_password, stripe_secret_key, openai_api_key, …
    for (const s of ["apikey", "token", "password", "secret", "secretkey", "privatekey"]) {
      if (k.endsWith(s) && k !== "tokens" && !k.endsWith("maxtoken") && !k.endsWith("tokencount")) return true
    }
    return false
  }
  const redactString = (text: string): string => {
    if (text.length < 8) return text
    let out = text
    if (!anyPattern.test(out) && !literals.some((l) => out.includes(l))) return out
    for (const literal of literals) if (out.includes(literal)) out = out.split(literal).join("[REDACTED:configured]")
    for (const { label, pattern } of patterns) {
      pattern.lastIndex = 0
      if (pattern.test(out)) {
        pattern.lastIndex = 0
        out = out.replace(pattern, `[REDACTED:${label}]`)
      }
    }
    return out
  }
  const walk = (value: unknown, depth: number): unknown => {
    if (typeof value === "string") return redactString(value)
    if (value === null || typeof value !== "object" || depth > 64) return value
    if (Array.isArray(value)) return value.map((v) => walk(v, depth + 1))
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) {
      out[k] =
        isSecretKey(k) && v !== null && v !== undefined && v !== "" && typeof v !== "boolean"
          ? `[REDACTED:${normalizeKey(k)}]`
          : walk(v, depth + 1)
    }
    return out
  }
  return { redact: <A>(value: A) => walk(value, 0) as A, redactString }
}

/** A redactor with the default rules. @since 0.1.0 @category Constructors */
export const defaultRedactor: Redactor = make()

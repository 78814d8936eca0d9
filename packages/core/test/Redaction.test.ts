import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { Redaction } from "../src/index.js"

const LITERALS = ["my-configured-secret-value", "correct horse battery staple"]
const redactor = Redaction.make({ literals: LITERALS })

const UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
const LOWER = "abcdefghijklmnopqrstuvwxyz"
const DIGITS = "0123456789"
const ALNUM = UPPER + LOWER + DIGITS

const chars = (set: string, minLength: number, maxLength: number) =>
  fc.string({ unit: fc.constantFrom(...set), minLength, maxLength })
/** Random characters from `set` with at least one digit somewhere. */
const withDigit = (set: string, min: number, max: number) =>
  fc
    .tuple(chars(set, 0, max), fc.constantFrom(...DIGITS), chars(set, Math.max(0, min - 1), max))
    .map(([a, d, b]) => a + d + b)

interface Sample {
  /** The secret in the form it is written (keyword, header, armour, …). */
  readonly text: string
  /** What must never be emitted. */
  readonly secrets: ReadonlyArray<string>
}
const bare = (arb: fc.Arbitrary<string>): fc.Arbitrary<Sample> => arb.map((s) => ({ text: s, secrets: [s] }))

/** One generator per default pattern (by label), plus the configured literals. */
const samples: Record<string, fc.Arbitrary<Sample>> = {
  "private-key": fc
    .tuple(
      fc.constantFrom("", "RSA ", "EC ", "OPENSSH "),
      fc.array(chars(`${ALNUM}+/`, 16, 64), { minLength: 1, maxLength: 5 })
    )
    .map(([kind, lines]) => ({
      text: `-----BEGIN ${kind}PRIVATE KEY-----\n${lines.join("\n")}\n-----END ${kind}PRIVATE KEY-----`,
      secrets: lines
    })),
  authorization: fc
    .tuple(
      fc.mixedCase(fc.constantFrom("authorization", "proxy-authorization")),
      fc.constantFrom(": ", ":", " = ", '": "', "=", ":\t"),
      fc.option(fc.mixedCase(fc.constantFrom("bearer", "basic", "token", "digest", "negotiate"))),
      withDigit(`${ALNUM}._~+/-`, 12, 48)
    )
    .map(([header, sep, scheme, token]) => ({
      text: `${header}${sep}${scheme === null ? "" : `${scheme} `}${token}`,
      secrets: [token]
    })),
  "bearer-token": fc
    .tuple(fc.mixedCase(fc.constantFrom("bearer", "basic", "token")), withDigit(`${ALNUM}._~+/-`, 12, 48))
    .map(([scheme, token]) => ({ text: `${scheme} ${token}`, secrets: [token] })),
  jwt: bare(
    fc
      .tuple(chars(`${ALNUM}_-`, 8, 30), chars(`${ALNUM}_-`, 8, 30), chars(`${ALNUM}_-`, 8, 40))
      .map(([h, p, s]) => `eyJ${h}.eyJ${p}.${s}`)
  ),
  "anthropic-key": bare(chars(`${ALNUM}_-`, 16, 60).map((s) => `sk-ant-${s}`)),
  "openai-key": bare(
    fc
      .tuple(fc.constantFrom("", "proj-", "svcacct-", "admin-"), chars(`${ALNUM}_-`, 20, 80))
      .map(([kind, s]) => `sk-${kind}${s}`)
  ),
  "stripe-key": bare(
    fc
      .tuple(fc.constantFrom("sk", "rk", "pk"), fc.constantFrom("live", "test"), chars(ALNUM, 16, 40))
      .map(([a, b, s]) => `${a}_${b}_${s}`)
  ),
  "aws-access-key": bare(
    fc.tuple(fc.constantFrom("AKIA", "ASIA"), chars(UPPER + DIGITS, 16, 16)).map(([p, s]) => p + s)
  ),
  "github-token": bare(
    fc.oneof(
      fc.tuple(fc.constantFrom(..."pousr"), chars(ALNUM, 36, 40)).map(([k, s]) => `gh${k}_${s}`),
      chars(`${ALNUM}_`, 40, 82).map((s) => `github_pat_${s}`)
    )
  ),
  "gitlab-token": bare(chars(`${ALNUM}_-`, 20, 20).map((s) => `glpat-${s}`)),
  "slack-token": bare(
    fc.tuple(fc.constantFrom(..."abposr"), chars(`${ALNUM}-`, 10, 50)).map(([k, s]) => `xox${k}-${s}`)
  ),
  "google-api-key": bare(chars(`${ALNUM}_-`, 35, 35).map((s) => `AIza${s}`)),
  "huggingface-token": bare(chars(ALNUM, 34, 34).map((s) => `hf_${s}`)),
  "npm-token": bare(chars(ALNUM, 36, 36).map((s) => `npm_${s}`)),
  "url-credentials": fc
    .tuple(
      fc.constantFrom("https", "postgres", "redis", "amqp+ssl"),
      chars(LOWER, 1, 12),
      withDigit(`${ALNUM}!$%*-_.~`, 10, 24),
      fc.constantFrom("db.example.com", "10.0.0.7:5432")
    )
    .map(([scheme, user, pass, host]) => ({ text: `${scheme}://${user}:${pass}@${host}/x`, secrets: [pass] })),
  "secret-assignment": fc
    .tuple(
      fc.mixedCase(
        fc.constantFrom(
          "api_key",
          "api-key",
          "apikey",
          "x-api-key",
          "secret",
          "client_secret",
          "password",
          "DB_PASSWORD",
          "passwd",
          "token",
          "csrf_token",
          "access_key",
          "aws_secret_access_key",
          "private_key",
          "cookie",
          "credentials"
        )
      ),
      fc.constantFrom("=", ": ", " = ", '": "', "='", ":\t", ":"),
      withDigit(`${ALNUM}_-+=./@#%&*~`, 6, 30)
    )
    .map(([key, sep, value]) => ({ text: `${key}${sep}${value}`, secrets: [value] })),
  "configured literal": fc.constantFrom(...LITERALS).map((l) => ({ text: l, secrets: [l] }))
}

/** Realistic text with no secret in it: prose, code, shell, SQL, config. None of it may change. */
const ORDINARY = [
  "The token limit for this model is 128k; set max_tokens=4096 to be safe.",
  "Basic understanding of Kubernetes is assumed.",
  "Token verification failed because the signature expired.",
  "The bearer of this letter is a friend.",
  "const token = await getToken(session)",
  "interface Login { user: string; password: string }",
  "export function authorize(req: Request): boolean {",
  "headers.authorization = req.headers.authorization",
  "api_key: process.env.OPENAI_API_KEY",
  "token = tokens[0]",
  "secret = os.environ['SECRET']",
  "password = getpass.getpass()",
  "return { token: undefined }",
  "tokenizer: cl100k_base, token_count: 123456",
  "The secret to good bread is patience.",
  "See https://example.com/docs/auth#bearer-tokens for details.",
  "git clone https://github.com/palyra/palyra.git && cd palyra",
  "postgres://localhost:5432/app and user@example.com",
  "Use scikit-learn and pandas for the analysis.",
  "AKIA is the prefix of AWS access key ids; eyJ is how base64 JSON begins.",
  "SELECT id, title FROM sessions WHERE principal = ? AND key_digest = ?",
  "ls -la /home/user/projects && cd ~/src",
  "Set OPENAI_API_KEY in your environment, then run pnpm dev.",
  "for token in tokens: print(token)",
  "The basic plan costs 20 dollars a month.",
  "apiKey: Schema.String, secret: Redacted<string>",
  "Error: the password must be at least 12 characters long."
]
const LOREM = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do"]
const prose = fc
  .array(fc.oneof(fc.constantFrom(...ORDINARY), fc.constantFrom(...LOREM)), { maxLength: 3 })
  .map((parts) => parts.join(" "))
const gap = fc.constantFrom(" ", "\n", "\t", ", ", "  ", "\n\n")

const stream = (parts: ReadonlyArray<string>, r: Redaction.Redactor = redactor) => {
  const s = Redaction.streaming(r)
  const pieces = parts.map((p) => s.push(p))
  pieces.push(s.flush())
  return pieces
}

/** Split `text` at every position into 2 pieces, and (with a drawn second cut) into 3. */
const everySplit = (text: string, step: number, f: (parts: ReadonlyArray<string>) => void) => {
  for (let i = 0; i <= text.length; i++) {
    f([text.slice(0, i), text.slice(i)])
    const j = i + (step % (text.length - i + 1))
    f([text.slice(0, i), text.slice(i, j), text.slice(j)])
  }
}

describe("Redaction.redactString", () => {
  it("has a generator for every default pattern", () => {
    const labels = Redaction.defaultPatterns.map((p) => p.label)
    assert.deepStrictEqual(
      labels.filter((l) => !(l in samples)),
      []
    )
  })

  it("the reported leak: a lower-case `authorization: bearer` header in a user message", () => {
    const token = "q7Z0xv1nW8cR2yT5bK9mL3pA6sD4fG0hJ8kE2uIo"
    for (const text of [
      `curl -H "authorization: bearer ${token}" https://api.example.com`,
      `AUTHORIZATION: BEARER ${token}`,
      `auth header is bearer ${token}`
    ]) {
      const out = redactor.redactString(text)
      assert.notInclude(out, token)
      assert.include(out, "[REDACTED:")
    }
  })

  it("keeps provider prefixes exact: a different case is not that key", () => {
    const body = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
    assert.strictEqual(redactor.redactString(`ghp_${body}`), "[REDACTED:github-token]")
    assert.strictEqual(redactor.redactString(`GHP_${body}`), `GHP_${body}`)
    assert.strictEqual(redactor.redactString("AKIAIOSFODNN7EXAMPLE"), "[REDACTED:aws-access-key]")
    assert.strictEqual(redactor.redactString("akiaiosfodnn7example"), "akiaiosfodnn7example")
  })

  it("leaves ordinary prose and code unchanged", () => {
    for (const text of ORDINARY) assert.strictEqual(redactor.redactString(text), text)
  })

  it("its pre-check skips only text no default pattern changes", () => {
    // Every default pattern applied unconditionally, in order: what the pre-check may shortcut.
    const plain = Redaction.make()
    const full = (text: string) =>
      Redaction.defaultPatterns.reduce(
        (out, p) => out.replace(new RegExp(p.pattern.source, p.pattern.flags), `[REDACTED:${p.label}]`),
        text
      )
    const piece = fc.oneof(
      fc.oneof(...Object.values(samples)).map((s) => s.text),
      fc.mixedCase(
        fc.constantFrom("sk-", "SK_", "rk_", "ghp_", "Github_Pat_", "glpat-", "xoxb-", "aiza", "EYJ", "hf_", "npm_")
      ),
      fc.mixedCase(fc.constantFrom("bearer ", "basic ", "token=", "api-key: ", "private key", "://a:b@", "cookie ")),
      fc.string({ maxLength: 24 })
    )
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 6 }), (pieces) => {
        const text = pieces.join(" ")
        assert.strictEqual(plain.redactString(text), full(text))
      }),
      { numRuns: 2000 }
    )
  })
})

describe("Redaction.streaming", () => {
  it("the reported leak: a key streamed in two pieces is never emitted whole or in parts", () => {
    const pieces = stream(["Here is your key: sk-proj-jN4H", "FNn8q2WcR5tY8uI1oP4aS7dF0gH3 — keep it safe."])
    const text = pieces.join("")
    assert.notInclude(text, "jN4H")
    assert.notInclude(text, "FNn8")
    assert.strictEqual(text, "Here is your key: [REDACTED:openai-key] — keep it safe.")
    assert.strictEqual(pieces[0], "Here is your key: ")
  })

  for (const [label, sample] of Object.entries(samples)) {
    it(`${label}: at every split into 2–3 pushes, no emitted text holds the secret and the result equals redactString`, () => {
      fc.assert(
        fc.property(sample, prose, prose, gap, gap, fc.nat(), (s, before, after, g1, g2, step) => {
          const text = `${before}${g1}${s.text}${g2}${after}`
          const whole = redactor.redactString(text)
          for (const secret of s.secrets) if (whole.includes(secret)) throw new Error(`redactString kept ${secret}`)
          everySplit(text, step, (parts) => {
            const pieces = stream(parts)
            const joined = pieces.join("")
            // Every piece and every concatenation of emitted pieces is a substring of `joined`.
            for (const secret of s.secrets) {
              if (joined.includes(secret)) throw new Error(`emitted ${secret} from ${JSON.stringify(parts)}`)
            }
            if (joined !== whole) {
              throw new Error(
                `stream ${JSON.stringify(pieces)} != ${JSON.stringify(whole)} for ${JSON.stringify(parts)}`
              )
            }
          })
        }),
        { numRuns: 25 }
      )
    })
  }

  it("passes ordinary text through unchanged at every split", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(prose, gap), { minLength: 1, maxLength: 4 }), fc.nat(), (parts, step) => {
        const text = parts.map(([p, g]) => p + g).join("")
        if (redactor.redactString(text) !== text) throw new Error(`redactString changed ${JSON.stringify(text)}`)
        everySplit(text, step, (split) => {
          const joined = stream(split).join("")
          if (joined !== text) throw new Error(`changed ${JSON.stringify(text)} split as ${JSON.stringify(split)}`)
        })
      }),
      { numRuns: 200 }
    )
  })

  it("holds back only the unfinished word: complete text is emitted at once", () => {
    const s = Redaction.streaming(redactor)
    assert.strictEqual(s.push("Hello there, how are"), "Hello there, how ")
    assert.strictEqual(s.push(" you"), "are ")
    assert.strictEqual(s.push(" today? My token "), "you today? My ")
    assert.strictEqual(s.push("is here."), "token is ")
    assert.strictEqual(s.flush(), "here.")
    // Ready for the next message.
    assert.strictEqual(s.push("again "), "again ")
  })

  it("past the hold-back cap, a unit is emitted only as a marker, through to its end", () => {
    const secret = `sk-proj-${"A1b2C3d4".repeat(20)}`
    const s = Redaction.streaming(redactor, { maxHoldBack: 64 })
    const out: Array<string> = []
    out.push(s.push("start "))
    for (let i = 0; i < secret.length; i += 7) out.push(s.push(secret.slice(i, i + 7)))
    out.push(s.push(" after the key"))
    out.push(s.flush())
    const text = out.join("")
    assert.strictEqual(text, `start ${Redaction.TOO_LONG} after the key`)
    for (let i = 0; i + 8 <= secret.length; i++) assert.notInclude(text, secret.slice(i, i + 8))
  })

  it("a private key longer than the cap is dropped through its END line", () => {
    const body = Array.from({ length: 40 }, (_, i) => `MIIEv${i}QIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7`).join(
      "\n"
    )
    const text = `key:\n-----BEGIN RSA PRIVATE KEY-----\n${body}\n-----END RSA PRIVATE KEY-----\nDone.`
    const s = Redaction.streaming(redactor, { maxHoldBack: 256 })
    const out: Array<string> = []
    for (let i = 0; i < text.length; i += 13) out.push(s.push(text.slice(i, i + 13)))
    out.push(s.flush())
    assert.strictEqual(out.join(""), "key:\n[REDACTED:private-key]\nDone.")
  })

  it("an unterminated private key is never emitted, even at flush", () => {
    const s = Redaction.streaming(redactor)
    const out = [s.push("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcw"), s.flush()].join("")
    assert.strictEqual(out, "[REDACTED:private-key]")
  })
})

describe("Redaction.redact", () => {
  /** A value nested `depth` levels deep (objects and arrays alternating) around `leaf`, built without recursion. */
  const nest = (depth: number, leaf: unknown) => {
    let v: unknown = leaf
    for (let i = 0; i < depth; i++) v = i % 2 === 0 ? { child: v, note: "ok" } : [v]
    return v
  }
  const GH = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"

  it("at any depth up to 100,000: no stack overflow, the secret is gone", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 100_000 }), fc.boolean(), (depth, named) => {
        const leaf = named ? { password: "hunter2-correct-horse" } : { text: `token is ${GH}` }
        const out = JSON.stringify(redactor.redact({ args: nest(depth, leaf) }))
        if (out.includes("hunter2-correct-horse") || out.includes(GH)) return false
        // Within the depth limit the structure is kept and only the secret is replaced.
        return depth + 2 <= 64 ? !out.includes(Redaction.TOO_DEEP) : out.includes(Redaction.TOO_DEEP)
      }),
      { numRuns: 40 }
    )
    const deepest = JSON.stringify(redactor.redact(nest(100_000, GH)))
    assert.notInclude(deepest, GH)
    assert.include(deepest, Redaction.TOO_DEEP)
  })

  it("keeps shallow structure, redacts secret-named fields, keys and values, and does not modify its input", () => {
    const input = JSON.parse(
      `{"__proto__": {"polluted": true}, "headers": {"Authorization": "Bearer x", "accept": "json"}, "${GH}": 1, "list": [1, "sk-ant-api03-ZYXWVUTSRQPONMLKJIH", null]}`
    )
    const before = JSON.stringify(input)
    const out = redactor.redact(input) as Record<string, unknown>
    assert.strictEqual(JSON.stringify(input), before)
    assert.deepStrictEqual(
      JSON.parse(JSON.stringify(out)),
      JSON.parse(
        `{"__proto__": {"polluted": true}, "headers": {"Authorization": "[REDACTED:authorization]", "accept": "json"}, "[REDACTED:github-token]": 1, "list": [1, "[REDACTED:anthropic-key]", null]}`
      )
    )
    // `__proto__` stays a field of the copy: it neither replaced the copy's prototype nor polluted Object's.
    assert.strictEqual(Object.getPrototypeOf(out), Object.prototype)
    assert.isTrue(Object.hasOwn(out, "__proto__"))
    assert.isUndefined(({} as Record<string, unknown>).polluted)
  })

  it("decides a field name the same way the first time and every later time (the per-name memo, past its bound too)", () => {
    const warm = Redaction.make({ literals: LITERALS })
    const secretKey = fc.constantFrom("api_key", "Authorization", "db_password", "maxTokens", "tokens", "text", GH)
    const object = fc.dictionary(
      // Short names (memoized), long ones (> 64 characters: decided each time) and names holding a secret.
      fc.oneof(
        secretKey,
        fc.string({ maxLength: 12 }),
        fc.string({ minLength: 65, maxLength: 90 }),
        fc.constant(`${GH}${"k".repeat(70)}`)
      ),
      fc.oneof(fc.string(), fc.constant(GH)),
      {
        maxKeys: 8
      }
    )
    fc.assert(
      fc.property(fc.array(object, { minLength: 1, maxLength: 40 }), (objects) => {
        for (const o of objects) {
          // A redactor that has never seen these names decides exactly as the one that has (often).
          const cold = Redaction.make({ literals: LITERALS }).redact(o)
          if (JSON.stringify(warm.redact(o)) !== JSON.stringify(cold)) return false
          if (JSON.stringify(cold).includes(GH)) return false
        }
        return true
      }),
      { numRuns: 60 }
    )
    // Over 1,024 distinct names (the memo starts over) and back to the first ones: still the same answers.
    for (let i = 0; i < 3000; i++) warm.redact({ [`field${i}`]: "x" })
    assert.deepStrictEqual(warm.redact<unknown>({ api_key: "abcdefgh1", [GH]: 1, maxTokens: 5, tokens: 7 }), {
      api_key: "[REDACTED:apikey]",
      "[REDACTED:github-token]": 1,
      maxTokens: 5,
      tokens: 7
    })
  })

  it("ends on a cycle and replaces containers past the size budget", () => {
    const cyclic: Record<string, unknown> = { name: "loop" }
    cyclic.self = cyclic
    assert.include(JSON.stringify(Redaction.make({ maxDepth: 8 }).redact(cyclic)), Redaction.TOO_DEEP)
    const small = Redaction.make({ maxNodes: 100 })
    assert.deepStrictEqual(small.redact<unknown>({ big: Array.from({ length: 1000 }, () => "x"), kept: [1, 2] }), {
      big: Redaction.TOO_LARGE,
      kept: [1, 2]
    })
  })
})

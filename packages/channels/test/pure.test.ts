import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option, Schema } from "effect"
import * as fc from "fast-check"
import { ChannelConfig, Codes, InboundMessage, Mentions, Outbox, SessionKey } from "../src/index.js"

describe("SessionKey", () => {
  const component = fc.oneof(
    fc.string({ maxLength: 8 }),
    fc.constantFrom("", "/", ":", "%", "%2F", "%25", "t", "s", "t:", "s:x", "a/b", "a:b", "-"),
    fc.string({ unit: fc.constantFrom("/", ":", "%", "2", "F", "5", "3", "A", "t", "s"), maxLength: 6 })
  )
  const parts = fc.record(
    {
      channel: component,
      account: component,
      conversation: component,
      thread: component,
      sender: component
    },
    { requiredKeys: ["channel", "account", "conversation"] }
  )
  const same = (a: SessionKey.KeyParts, b: SessionKey.KeyParts) =>
    a.channel === b.channel &&
    a.account === b.account &&
    a.conversation === b.conversation &&
    a.thread === b.thread &&
    a.sender === b.sender

  it("distinct tuples give distinct keys (property)", () => {
    fc.assert(
      fc.property(parts, parts, (a, b) => {
        if (same(a, b)) return SessionKey.make(a) === SessionKey.make(b)
        return SessionKey.make(a) !== SessionKey.make(b)
      }),
      { numRuns: 5000 }
    )
  })

  it("parse inverts make (so make is injective), and refuses foreign keys", () => {
    fc.assert(
      fc.property(parts, (p) => {
        const back = SessionKey.parse(SessionKey.make(p))
        return Option.isSome(back) && same(back.value, p)
      }),
      { numRuns: 3000 }
    )
    assert.isTrue(Option.isNone(SessionKey.parse("chan1/a/b/c/t/s/extra")))
    assert.isTrue(Option.isNone(SessionKey.parse("other/a/b/c/t/s")))
    assert.isTrue(Option.isNone(SessionKey.parse("chan1/a/b/c/x/s")))
  })

  it("thread and sender absent vs empty vs present are all different", () => {
    const base = { channel: "tg", account: "1", conversation: "c" }
    const keys = new Set([
      SessionKey.make(base),
      SessionKey.make({ ...base, thread: "" }),
      SessionKey.make({ ...base, sender: "" }),
      SessionKey.make({ ...base, thread: "", sender: "" }),
      SessionKey.make({ ...base, thread: "s" }),
      SessionKey.make({ ...base, sender: "t" })
    ])
    assert.strictEqual(keys.size, 6)
  })

  it("per-identity principals are distinct per identity and carry the reserved prefix", () => {
    const a = SessionKey.identityPrincipal({ channel: "tg", account: "1:2", senderId: "3" })
    const b = SessionKey.identityPrincipal({ channel: "tg", account: "1", senderId: "2:3" })
    assert.notStrictEqual(a, b)
    assert.isTrue(a.startsWith(SessionKey.IDENTITY_PRINCIPAL_PREFIX))
  })
})

describe("Mentions", () => {
  it("match only on identifier boundaries", () => {
    const yes = ["@bot", "hi @bot", "@bot, help", "(@bot)", "hey @BOT!", "ask @bot.", "@bot\nnext", "yo @bot: hi"]
    const no = ["me@bot.example", "@bots", "@bot_two", "x@bot", "@bot.example", "email@bot", "@@bot", "@bot-x", "bot"]
    for (const t of yes) assert.isTrue(Mentions.matchesAny(t, ["@bot"]), t)
    for (const t of no) assert.isFalse(Mentions.matchesAny(t, ["@bot"]), t)
    assert.isTrue(Mentions.matchesAny("hey palyra, what's up", ["palyra"]))
    assert.isFalse(Mentions.matchesAny("see palyra.dev", ["palyra"]))
    assert.isFalse(Mentions.matchesAny("palyrabot", ["palyra"]))
  })

  it("broadcasts are found on boundaries and stripped", () => {
    assert.isTrue(Mentions.hasBroadcast("@everyone look"))
    assert.isTrue(Mentions.hasBroadcast("hey @here!"))
    assert.isFalse(Mentions.hasBroadcast("mail me@here.example"))
    assert.strictEqual(Mentions.stripBroadcasts("@everyone  @bot   what now @here"), "@bot what now")
  })
})

describe("Codes", () => {
  it("pairing codes: 8 Crockford base32 characters, read back leniently", () => {
    const seen = new Set<string>()
    for (let i = 0; i < 2000; i++) {
      const code = Codes.pairingCode()
      assert.match(code, /^[0-9A-HJKMNP-TV-Z]{8}$/)
      seen.add(code)
      assert.strictEqual(Codes.normalize(` ${code.toLowerCase().slice(0, 4)}-${code.slice(4)} `, 8), code)
    }
    assert.isAbove(seen.size, 1990)
    assert.strictEqual(Codes.normalize("ABCD-EFGO", 8), "ABCDEFG0")
    assert.strictEqual(Codes.normalize("abcdefil", 8), "ABCDEF11")
    assert.isUndefined(Codes.normalize("ABCDEFGU", 8))
    assert.isUndefined(Codes.normalize("ABCDEFG", 8))
    assert.notStrictEqual(Codes.digest("ABCDEFGH"), Codes.digest("ABCDEFGJ"))
  })

  it("every alphabet symbol is drawn (no bias to a subset)", () => {
    const counts = new Map<string, number>()
    for (let i = 0; i < 4000; i++) for (const c of Codes.random(8)) counts.set(c, (counts.get(c) ?? 0) + 1)
    assert.strictEqual(counts.size, 32)
    for (const n of counts.values()) assert.isAbove(n, 500) // expected 1000 each
  })
})

describe("Outbox.split", () => {
  it("parts fit the limit, keep order and lose only whitespace at cuts (property)", () => {
    const text = fc.string({ unit: fc.constantFrom("a", "b", " ", "\n", "😀", "é"), maxLength: 400 })
    fc.assert(
      fc.property(text, fc.integer({ min: 2, max: 60 }), (t, limit) => {
        const parts = Outbox.split(t, limit)
        for (const p of parts) {
          if (p.length > limit) return false
          // never half a surrogate pair
          if (/[\uD800-\uDBFF]$/.test(p) || /^[\uDC00-\uDFFF]/.test(p)) return false
        }
        return parts.join("").replace(/\s/g, "") === t.replace(/\s/g, "")
      }),
      { numRuns: 2000 }
    )
  })

  it("prefers paragraph, then line, then word boundaries", () => {
    assert.deepStrictEqual(Outbox.split("aaaa bbbb\n\ncccc dddd", 14), ["aaaa bbbb", "cccc dddd"])
    assert.deepStrictEqual(Outbox.split("aaaa bbbb cccc", 10), ["aaaa bbbb", "cccc"])
    assert.deepStrictEqual(Outbox.split("abcdefghij", 4), ["abcd", "efgh", "ij"])
    assert.deepStrictEqual(Outbox.split("short", 4000), ["short"])
  })

  it("idempotency keys are deterministic per part and differ between parts", () => {
    assert.strictEqual(Outbox.deliveryKey(["s", "r", "reply", "0"]), Outbox.deliveryKey(["s", "r", "reply", "0"]))
    assert.notStrictEqual(Outbox.deliveryKey(["s", "r", "reply", "0"]), Outbox.deliveryKey(["s", "r", "reply", "1"]))
    assert.notStrictEqual(Outbox.deliveryKey(["s", "r1"]), Outbox.deliveryKey(["s1", "r"]))
  })
})

describe("InboundMessage", () => {
  const valid = {
    channel: "tg",
    account: "42",
    conversation: "100",
    sender: { id: "7", verified: true },
    platformMessageId: "100:1",
    text: "hi",
    attachments: [],
    isDirect: true,
    mentions: [],
    receivedAt: 1
  }
  it.effect("decodes a valid candidate and refuses malformed ones with InvalidArgument", () =>
    Effect.gen(function* () {
      const ok = yield* InboundMessage.decode(valid)
      assert.strictEqual(ok.text, "hi")
      const bad: ReadonlyArray<unknown> = [
        null,
        "text",
        { ...valid, channel: "Bad Channel" },
        { ...valid, sender: { id: "", verified: true } },
        { ...valid, sender: { id: "7" } },
        { ...valid, platformMessageId: 5 },
        { ...valid, attachments: [{ kind: "exe" }] },
        { ...valid, attachments: Array.from({ length: 33 }, () => ({ kind: "file" })) },
        { ...valid, receivedAt: -1 },
        { ...valid, text: "x".repeat(InboundMessage.MAX_TEXT_CHARS + 1) }
      ]
      for (const candidate of bad) {
        const result = yield* Effect.either(InboundMessage.decode(candidate))
        assert.isTrue(Either.isLeft(result))
        if (Either.isLeft(result)) assert.strictEqual(result.left._tag, "InvalidArgument")
      }
    })
  )
})

describe("ChannelConfig", () => {
  const decode = Schema.decodeUnknownEither(ChannelConfig.Entries)
  const telegram = { kind: "telegram", name: "tg", bot_token: "123:abcdefghijklmnopqrstuvwxyz" }
  const webhook = { kind: "webhook", name: "hooks", signing_secret: "s".repeat(32), listen_port: 7430 }
  const slack = {
    kind: "slack",
    name: "slack",
    signing_secret: "8f742231b10e8888abcd99yyyzzz85a5",
    bot_token: "xoxb-1111-2222-TESTtokenABCDEF",
    listen_port: 7431
  }

  it("decodes [[channels]] entries with defaults and lists every secret for redaction", () => {
    const entries = Either.getOrThrow(
      decode([
        { ...telegram, mode: "webhook", webhook_secret: "tg-secret-0123456789", listen_port: 8443, dm_policy: "allow" },
        { ...webhook, coalesce_ms: 0 }
      ])
    )
    assert.deepStrictEqual(ChannelConfig.secrets(entries), [
      "123:abcdefghijklmnopqrstuvwxyz",
      "tg-secret-0123456789",
      "s".repeat(32)
    ])
    const settings = ChannelConfig.toSettings(entries[0]!)
    assert.strictEqual(settings.dmPolicy, "allow")
    assert.strictEqual(settings.enabled, true)
    const options = ChannelConfig.telegramOptions(entries[0] as ChannelConfig.TelegramEntry)
    assert.strictEqual(options.mode?._tag, "webhook")
    // secrets travel as Redacted values: printing the options does not show them
    assert.notInclude(String(options.token), "abcdefghij")
  })

  it("a Slack entry: both secrets are redaction literals and travel as Redacted values", () => {
    const [entry] = decode([slack]).pipe(Either.getOrThrow)
    assert.deepStrictEqual(ChannelConfig.secrets([entry!]), [slack.signing_secret, slack.bot_token])
    const options = ChannelConfig.slackOptions(entry as ChannelConfig.SlackEntry)
    assert.strictEqual(options.listen.host, "127.0.0.1")
    assert.notInclude(String(options.botToken), "xoxb")
    assert.strictEqual(ChannelConfig.toSettings(entry!).dmPolicy, undefined)
  })

  it("refuses bad entries with a message naming the problem", () => {
    const bad: ReadonlyArray<readonly [unknown, RegExp]> = [
      [[telegram, { ...telegram }], /used twice/],
      [[{ ...telegram, bot_token: "nope" }], /Telegram bot token/],
      [[{ ...telegram, mode: "webhook" }], /webhook mode needs/],
      [[{ ...webhook, signing_secret: "short" }], /at least 32/],
      [[{ ...webhook, name: "Bad Name" }], /channel name/],
      [[{ ...webhook, callback_url: "ftp://x" }], /http\(s\) URL/],
      [[{ ...webhook, kind: "discord" }], /kind/],
      [[{ ...slack, bot_token: "xoxa-nope" }], /Slack bot token/],
      [[{ ...slack, signing_secret: "not a secret!" }], /signing secret/],
      [[{ ...slack, listen_port: undefined }], /listen_port/]
    ]
    for (const [input, message] of bad) {
      const result = decode(input)
      assert.isTrue(Either.isLeft(result), JSON.stringify(input))
      if (Either.isLeft(result)) assert.match(String(result.left), message)
    }
  })
})

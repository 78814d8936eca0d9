import { existsSync, readFileSync } from "node:fs"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Gateway, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import Database from "better-sqlite3"
import { Effect, Layer, Redacted, Schema } from "effect"
import { ChannelConfig, ChannelStore, Channels, SignedWebhook, SqliteChannelStore } from "../src/index.js"
import { eventually, operator } from "./support/env.js"
import { tempDir } from "./support/tmp.js"

const SECRET = "a-signing-secret-of-at-least-32-chars!"
const secret = Redacted.make(SECRET)

interface Received {
  readonly key: string
  readonly verified: boolean
  readonly body: { readonly text: string; readonly conversation: string }
}

/** A receiver for replies: checks our signature like a real integration would, dedupes by key. */
const receiver = Effect.gen(function* () {
  const received: Array<Received> = []
  const seen = new Set<string>()
  const read = async (req: IncomingMessage) => {
    const chunks: Array<Buffer> = []
    for await (const c of req) chunks.push(c as Buffer)
    return Buffer.concat(chunks)
  }
  const server = createServer((req, res) => {
    read(req).then((body) => {
      const key = String(req.headers["idempotency-key"])
      const verified =
        SignedWebhook.verify(
          secret,
          {
            timestamp: req.headers["x-palyra-timestamp"] as string | undefined,
            signature: req.headers["x-palyra-signature"] as string | undefined
          },
          body,
          Date.now(),
          60_000
        ) === undefined
      if (!seen.has(key)) {
        seen.add(key)
        received.push({ key, verified, body: JSON.parse(body.toString("utf8")) })
      }
      res.writeHead(200, { "content-type": "application/json" })
      res.end(JSON.stringify({ id: `out-${received.length}` }))
    })
  })
  yield* Effect.acquireRelease(
    Effect.async<void>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.void))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  )
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/replies`, received }
})

const inbound = (fields: Record<string, unknown> = {}) => ({
  account: "acme",
  conversation: "c-1",
  sender: { id: "u-1", handle: "@ann", verified: true },
  platformMessageId: `pm-${Math.random().toString(36).slice(2)}`,
  text: "hello",
  attachments: [],
  isDirect: true,
  mentions: [],
  receivedAt: Date.now(),
  ...fields
})

const post = (url: string, body: string, headers: Record<string, string>) =>
  Effect.promise(() =>
    fetch(url, { method: "POST", body, headers: { "content-type": "application/json", ...headers } }).then(
      async (r) => ({ status: r.status, body: await r.text() })
    )
  )
const signed = (url: string, payload: unknown, at = Date.now(), key = secret) => {
  const body = JSON.stringify(payload)
  const ts = Math.floor(at / 1000)
  return post(url, body, { "x-palyra-timestamp": String(ts), "x-palyra-signature": SignedWebhook.sign(key, ts, body) })
}

const layerFor = (filename: string, callbackUrl: string, model: ScriptedModel.ScriptedModel) =>
  Channels.layer({
    channels: Schema.decodeUnknownSync(ChannelConfig.Entries)([
      {
        kind: "webhook",
        name: "hooks",
        signing_secret: SECRET,
        listen_port: 0,
        callback_url: callbackUrl,
        dm_policy: "allow",
        coalesce_ms: 0
      }
    ]),
    store: { filename },
    outbox: { pollInterval: "50 millis" }
  }).pipe(Layer.provideMerge(gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway>))

/** Where the webhook connector listens (it took a free port). */
const inboundUrl = Effect.map(Channels.Connectors, (all) => all.get("hooks")!.inboundUrl!)

describe("signed webhook connector", () => {
  it("sign/verify: constant-time HMAC over timestamp.body, a replay window, malformed headers refused", () => {
    const body = Buffer.from('{"x":1}')
    const now = 1_700_000_000_000
    const ts = now / 1000
    const good = SignedWebhook.sign(secret, ts, body)
    const check = (timestamp: string | undefined, signature: string | undefined, at = now) =>
      SignedWebhook.verify(secret, { timestamp, signature }, body, at, 300_000)
    assert.isUndefined(check(String(ts), good))
    assert.strictEqual(check(String(ts), SignedWebhook.sign(Redacted.make("other"), ts, body)), "bad_signature")
    assert.strictEqual(check(String(ts + 1), good), "bad_signature")
    assert.strictEqual(check(String(ts), good.replace("v1=", "v0=")), "bad_signature")
    assert.strictEqual(check(String(ts), good.slice(0, -2)), "bad_signature")
    assert.strictEqual(check(undefined, good), "bad_signature")
    assert.strictEqual(check("12ab", good), "bad_signature")
    assert.strictEqual(check(String(ts), good, now + 301_000), "stale_signature")
    assert.strictEqual(check(String(ts), good, now - 301_000), "stale_signature")
    // a changed body breaks it
    assert.strictEqual(
      SignedWebhook.verify(secret, { timestamp: String(ts), signature: good }, Buffer.from('{"x":2}'), now, 300_000),
      "bad_signature"
    )
  })

  it.live("forged or stale → 401 and nothing stored beyond a counter; a signed message is answered, signed", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const filename = join(dir, "channels.sqlite")
      const rx = yield* receiver
      const model = ScriptedModel.make((req) => ({
        text: `hi ${req.messages.at(-1)?.role === "user" ? (req.messages.at(-1) as { text: string }).text : ""}`
      }))
      yield* Effect.gen(function* () {
        const connector = yield* inboundUrl
        const forged = yield* signed(connector, inbound({ text: "let me in" }), Date.now(), Redacted.make("guess"))
        assert.strictEqual(forged.status, 401)
        const unsigned = yield* post(connector, JSON.stringify(inbound()), {})
        assert.strictEqual(unsigned.status, 401)
        const stale = yield* signed(connector, inbound({ text: "old news" }), Date.now() - 10 * 60_000)
        assert.strictEqual(stale.status, 401)
        const bad = yield* signed(connector, { not: "a message" })
        assert.strictEqual(bad.status, 400)
        const notJson = yield* post(connector, "{", {
          "x-palyra-timestamp": String(Math.floor(Date.now() / 1000)),
          "x-palyra-signature": SignedWebhook.sign(secret, Math.floor(Date.now() / 1000), "{")
        })
        assert.strictEqual(notJson.status, 400)
        const huge = yield* signed(connector, inbound({ text: "x".repeat(300 * 1024) }))
        assert.strictEqual(huge.status, 413)

        // Nothing of those requests is stored: only counters.
        const db = new Database(filename, { readonly: true })
        const count = (table: string) => (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n
        for (const table of ["inbound", "outbox", "bindings", "attempts", "pairing_codes", "watches"]) {
          assert.strictEqual(count(table), 0, table)
        }
        assert.deepStrictEqual(db.prepare("SELECT reason, count FROM rejections ORDER BY reason").all(), [
          { reason: "bad_signature", count: 2 },
          { reason: "malformed", count: 2 },
          { reason: "stale_signature", count: 1 }
        ])
        db.close()
        for (const file of [filename, `${filename}-wal`]) {
          const bytes = existsSync(file) ? readFileSync(file) : Buffer.alloc(0)
          assert.isFalse(bytes.includes("let me in"))
          assert.isFalse(bytes.includes("old news"))
        }
        const gateway = yield* Gateway.Gateway
        assert.deepStrictEqual(yield* gateway.listSessions(operator), [])
        assert.strictEqual(model.prompts.length, 0)

        // A signed message: routed (the channel allows DMs from anyone), answered through the callback.
        const message = inbound({ text: "ann here", channel: "someone-elses" })
        const accepted = yield* signed(connector, message)
        assert.strictEqual(accepted.status, 202)
        // a replay inside the window is a duplicate: accepted, not run again
        assert.strictEqual((yield* signed(connector, message)).status, 202)
        const replies = yield* eventually(
          Effect.sync(() => rx.received),
          (r) => r.length === 1,
          "the reply"
        )
        assert.strictEqual(replies[0]!.body.text, "hi ann here")
        assert.strictEqual(replies[0]!.body.conversation, "c-1")
        assert.isTrue(replies[0]!.verified)
        const store = yield* ChannelStore.ChannelStore
        const [delivery] = yield* eventually(store.listDeliveries({}), (d) => d[0]?.state === "sent", "sent")
        assert.strictEqual(delivery!.key, replies[0]!.key)
        assert.strictEqual(delivery!.platformMessageId, "out-1")
        assert.strictEqual(delivery!.channel, "hooks")
        assert.strictEqual(model.prompts.length, 1)
        const counts = Object.fromEntries((yield* store.rejections("hooks")).map((r) => [r.reason, r.count]))
        assert.strictEqual(counts.duplicate, 1)
      }).pipe(Effect.provide(layerFor(filename, rx.url, model)))
    }).pipe(Effect.scoped)
  )

  it.live("after a crash, an unknown delivery is re-sent with the same idempotency key (the receiver dedupes)", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const filename = join(dir, "channels.sqlite")
      const rx = yield* receiver
      yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteChannelStore.make({ filename })
          yield* store.enqueue([
            {
              key: "k-1",
              channel: "hooks",
              account: "acme",
              conversation: "c-9",
              thread: null,
              replyTo: null,
              sessionId: null,
              runId: null,
              part: "reply:0",
              text: "in flight when we died",
              createdAt: Date.now()
            }
          ])
          yield* store.updateDelivery("k-1", { state: "unknown", attempts: 1 }, Date.now())
        })
      )
      yield* Effect.gen(function* () {
        const got = yield* eventually(
          Effect.sync(() => rx.received),
          (r) => r.length === 1,
          "the resend"
        )
        assert.strictEqual(got[0]!.key, "k-1")
        const store = yield* ChannelStore.ChannelStore
        yield* eventually(store.listDeliveries({}), (d) => d[0]?.state === "sent" && d[0].attempts === 2, "sent")
      }).pipe(Effect.provide(layerFor(filename, rx.url, ScriptedModel.make([]))))
    }).pipe(Effect.scoped)
  )
})

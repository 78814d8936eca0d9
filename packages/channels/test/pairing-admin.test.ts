import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, type Pairing as PairingPort, ScriptedModel } from "@palyra/core"
import { Effect, Either, Metric, TestClock } from "effect"
import { ChannelRouter, ChannelStore, Pairing, SqliteChannelStore } from "../src/index.js"
import * as Metrics from "../src/internal/metrics.js"
import { channelsEnv, counts, message, operator } from "./support/env.js"
import { tempDir } from "./support/tmp.js"

const off = { window: 0 } as const
const echo = () => ScriptedModel.make(() => ({ text: "ok" }))
const admin = Effect.flatMap(Pairing.Pairing, Pairing.makeAdmin)
const outcome = (m: ReturnType<typeof message>) =>
  Effect.flatMap(ChannelRouter.ChannelRouter, (r) =>
    Effect.map(r.handle(m), (o) => (o._tag === "Rejected" ? o.reason : o._tag))
  )
const wrongCode = (right: string) => (right === "ZZZZZZZZ" ? "YYYYYYYY" : "ZZZZZZZZ")

describe("Pairing: the channel-wide attempt cap", () => {
  it.effect("N wrong codes from different senders pause pairing on the channel, then it resumes (TestClock)", () =>
    Effect.gen(function* () {
      const port = yield* admin
      const minted = yield* port.mint(operator, { channel: "tg", principal: "alice", ttlSeconds: 7200 })
      const wrong = wrongCode(minted.code)
      // five senders, one wrong code each: no sender is locked out, the channel is
      for (let i = 1; i <= 5; i++)
        assert.strictEqual(yield* outcome(message({ from: `s${i}`, text: wrong })), "pairing_failed")
      assert.strictEqual(yield* outcome(message({ from: "alice-phone", text: minted.code })), "pairing_throttled")
      assert.strictEqual(yield* outcome(message({ from: "s9", text: wrong })), "pairing_throttled")
      // a message without a code still gets the hint path, not the throttle
      assert.strictEqual(yield* outcome(message({ from: "s10", text: "hello" })), "not_paired")
      const c = yield* counts()
      assert.strictEqual(c.pairing_failed, 5)
      assert.strictEqual(c.pairing_throttled, 2)
      // …and exported as a metric, by channel and reason
      const throttled = yield* Metric.value(
        Metric.tagged(Metric.tagged(Metrics.rejections, "channel", "tg"), "reason", "pairing_throttled")
      )
      assert.strictEqual(throttled.count, 2)
      // the code was not consumed while pairing was paused
      assert.strictEqual((yield* port.list(operator))[0]!.status, "active")

      yield* TestClock.adjust("29 minutes")
      assert.strictEqual(yield* outcome(message({ from: "alice-phone", text: minted.code })), "pairing_throttled")
      yield* TestClock.adjust("2 minutes")
      assert.strictEqual(yield* outcome(message({ from: "alice-phone", text: minted.code })), "Paired")
      // another channel was never affected
      const other = yield* port.mint(operator, { channel: "other", principal: "bob" })
      assert.strictEqual(yield* outcome(message({ channel: "other", from: "b", text: other.code })), "Paired")
    }).pipe(
      Effect.provide(
        channelsEnv({
          model: echo(),
          channels: [
            {
              name: "tg",
              coalesce: off,
              pairing: {
                maxFailures: 3,
                channelMaxFailures: 5,
                channelFailureWindow: "10 minutes",
                channelLockout: "30 minutes"
              }
            },
            { name: "other", coalesce: off }
          ]
        })
      )
    )
  )
})

describe("Pairing: the operator's port (mint, list, revoke, identities, unpair) on a SQLite store", () => {
  it.scoped("operator-only; codes shown once; revoked codes and unpaired identities stop working", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* Effect.gen(function* () {
        const port = yield* admin
        const user = Caller.user("alice")

        // operator-only, checked in the implementation
        for (const attempt of [
          port.mint(user, { channel: "tg", principal: "alice" }),
          port.list(user),
          port.revoke(user, "0123456789abcdef"),
          port.listIdentities(user),
          port.unpair(user, "x")
        ] as const) {
          const refused = yield* Effect.either(attempt as Effect.Effect<unknown, PairingPort.PairingError>)
          assert.isTrue(Either.isLeft(refused) && refused.left._tag === "PermissionDenied")
        }
        const bad = yield* Effect.either(port.mint(operator, { channel: "tg", principal: "alice", ttlSeconds: -1 }))
        assert.isTrue(Either.isLeft(bad) && bad.left._tag === "InvalidArgument")
        const unknown = yield* Effect.either(port.mint(operator, { channel: "nope", principal: "alice" }))
        assert.isTrue(Either.isLeft(unknown) && unknown.left._tag === "NotFound")

        const first = yield* port.mint(operator, {
          channel: "tg",
          principal: "alice",
          ttlSeconds: 600,
          bindingTtlSeconds: 3600
        })
        assert.match(first.code, /^[0-9A-HJKMNP-TV-Z]{8}$/)
        assert.strictEqual(first.status, "active")
        assert.strictEqual(first.bindingTtlSeconds, 3600)
        const listed = yield* port.list(operator)
        assert.deepStrictEqual(
          listed.map((c) => [c.id, c.status, c.principal]),
          [[first.id, "active", "alice"]]
        )
        assert.notInclude(JSON.stringify(listed), first.code)

        // revoke by id: the code no longer pairs
        assert.strictEqual((yield* port.revoke(operator, first.id)).status, "revoked")
        assert.strictEqual(yield* outcome(message({ from: "1001", text: first.code })), "pairing_failed")
        const again = yield* Effect.either(port.revoke(operator, first.id))
        assert.isTrue(Either.isLeft(again) && again.left._tag === "NotFound")

        // revoke by the code itself
        const second = yield* port.mint(operator, { channel: "tg", principal: "alice" })
        assert.strictEqual((yield* port.revoke(operator, second.code.toLowerCase())).id, second.id)

        // pair, list the identity, unpair it: the sender is a stranger again
        const third = yield* port.mint(operator, { channel: "tg", principal: "alice" })
        assert.strictEqual(yield* outcome(message({ from: "1001", text: third.code })), "Paired")
        const used = yield* Effect.either(port.revoke(operator, third.code))
        assert.isTrue(Either.isLeft(used) && used.left._tag === "NotFound")
        const identities = yield* port.listIdentities(operator, { channel: "tg" })
        assert.deepStrictEqual(
          identities.map((i) => [i.senderId, i.principal, i.active, i.createdBy]),
          [["1001", "alice", true, "pairing-code"]]
        )
        assert.match(identities[0]!.id, /^[A-Za-z0-9_-]+$/)
        assert.strictEqual(yield* outcome(message({ from: "1001", text: "hi" })), "Admitted")
        const unpaired = yield* port.unpair(operator, identities[0]!.id)
        assert.isFalse(unpaired.active)
        assert.strictEqual(yield* outcome(message({ from: "1001", text: "hi again" })), "not_paired")
        const gone = yield* Effect.either(port.unpair(operator, identities[0]!.id))
        assert.isTrue(Either.isLeft(gone) && gone.left._tag === "NotFound")
        const junk = yield* Effect.either(port.unpair(operator, "not-an-id"))
        assert.isTrue(Either.isLeft(junk) && junk.left._tag === "NotFound")
        assert.deepStrictEqual((yield* port.list(operator)).map((c) => c.status).sort(), ["revoked", "revoked", "used"])
      }).pipe(
        Effect.provide(
          channelsEnv({
            model: echo(),
            channels: [{ name: "tg", coalesce: off }],
            store: SqliteChannelStore.layer({ filename: join(dir, "channels.sqlite") })
          })
        )
      )
    })
  )

  it.effect("the in-memory store lists and revokes codes the same way", () =>
    Effect.gen(function* () {
      const store = yield* ChannelStore.ChannelStore
      const port = yield* admin
      const a = yield* port.mint(operator, { channel: "tg", principal: "alice" })
      yield* TestClock.adjust("1 second")
      const b = yield* port.mint(operator, { channel: "tg", principal: "bob" })
      assert.deepStrictEqual(
        (yield* store.listPairingCodes({})).map((c) => c.principal),
        ["bob", "alice"]
      )
      assert.strictEqual((yield* port.revoke(operator, a.code)).status, "revoked")
      yield* TestClock.adjust("11 minutes")
      assert.deepStrictEqual(
        (yield* port.list(operator)).map((c) => [c.id, c.status]),
        [
          [b.id, "expired"],
          [a.id, "revoked"]
        ]
      )
    }).pipe(Effect.provide(channelsEnv({ model: echo(), channels: [{ name: "tg", coalesce: off }] })))
  )
})

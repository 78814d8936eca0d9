import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Either, Option, type Scope } from "effect"
import { ChannelStore, Codes, SqliteChannelStore } from "../src/index.js"
import { tempDir } from "./support/tmp.js"

type Make = Effect.Effect<ChannelStore.Service, unknown, Scope.Scope>

const drivers: ReadonlyArray<readonly [string, Make]> = [
  ["memory", Effect.sync(ChannelStore.makeMemory)],
  ["sqlite", Effect.flatMap(tempDir, (dir) => SqliteChannelStore.make({ filename: join(dir, "channels.sqlite") }))]
]

const alice = { channel: "tg", account: "bot1", senderId: "1001" }
const policy = { maxFailures: 3, windowMs: 60_000, lockoutMs: 600_000 }
const code = (digest: string, fields: Partial<ChannelStore.PairingCode> = {}): ChannelStore.PairingCode => ({
  digest,
  channel: "tg",
  principal: "alice",
  createdBy: "op",
  createdAt: 0,
  expiresAt: 1000,
  bindingTtlMs: null,
  usedAt: null,
  ...fields
})
const delivery = (key: string, at = 0, channel = "tg", conversation = "c1"): ChannelStore.NewDelivery => ({
  key,
  channel,
  account: "bot1",
  conversation,
  thread: null,
  replyTo: null,
  sessionId: "s",
  runId: "r",
  part: "reply:0",
  text: `text ${key}`,
  createdAt: at
})

for (const [name, make] of drivers) {
  describe(`ChannelStore contract (${name})`, () => {
    it.scoped("inbound dedupe: the first sighting wins, repeats are refused, pruning forgets old ones", () =>
      Effect.gen(function* () {
        const store = yield* make
        assert.isTrue(yield* store.claimInbound("tg", "m1", 10))
        assert.isFalse(yield* store.claimInbound("tg", "m1", 11))
        assert.isTrue(yield* store.claimInbound("other", "m1", 12))
        assert.strictEqual(yield* store.pruneInbound(11), 1)
        assert.isTrue(yield* store.claimInbound("tg", "m1", 13))
      })
    )

    it.scoped("pairing codes: single use, channel-bound, expire; redeeming binds the identity", () =>
      Effect.gen(function* () {
        const store = yield* make
        yield* store.putPairingCode(code("d1", { bindingTtlMs: 500 }))
        yield* store.putPairingCode(code("d2"))
        const dup = yield* Effect.either(store.putPairingCode(code("d1")))
        assert.isTrue(Either.isLeft(dup) && dup.left._tag === "Conflict")
        // wrong channel, unknown digest, expired: nothing changes
        assert.isTrue(
          Option.isNone(yield* store.redeemPairingCode({ digest: "d1", identity: { ...alice, channel: "x" }, at: 5 }))
        )
        assert.isTrue(Option.isNone(yield* store.redeemPairingCode({ digest: "nope", identity: alice, at: 5 })))
        assert.isTrue(Option.isNone(yield* store.redeemPairingCode({ digest: "d2", identity: alice, at: 1000 })))
        const bound = yield* store.redeemPairingCode({ digest: "d1", identity: alice, at: 100 })
        assert.isTrue(Option.isSome(bound))
        assert.strictEqual(Option.getOrThrow(bound).principal, "alice")
        assert.strictEqual(Option.getOrThrow(bound).expiresAt, 600)
        // single use
        const bob = { ...alice, senderId: "1002" }
        assert.isTrue(Option.isNone(yield* store.redeemPairingCode({ digest: "d1", identity: bob, at: 101 })))
        // the binding applies until it expires
        assert.isTrue(Option.isSome(yield* store.getBinding(alice, 599)))
        assert.isTrue(Option.isNone(yield* store.getBinding(alice, 600)))
      })
    )

    it.scoped("bindings: revocable, listed by channel and principal", () =>
      Effect.gen(function* () {
        const store = yield* make
        yield* store.putBinding({
          ...alice,
          principal: "alice",
          createdAt: 1,
          createdBy: "op",
          expiresAt: null,
          revokedAt: null
        })
        yield* store.putBinding({
          ...alice,
          senderId: "2",
          principal: "bob",
          createdAt: 2,
          createdBy: "op",
          expiresAt: null,
          revokedAt: null
        })
        assert.strictEqual((yield* store.listBindings({})).length, 2)
        assert.deepStrictEqual(
          (yield* store.listBindings({ principal: "bob" })).map((b) => b.senderId),
          ["2"]
        )
        const revoked = yield* store.revokeBinding(alice, 50)
        assert.strictEqual(Option.getOrThrow(revoked).revokedAt, 50)
        assert.isTrue(Option.isNone(yield* store.getBinding(alice, 51)))
        assert.isTrue(Option.isNone(yield* store.revokeBinding(alice, 52)))
      })
    )

    it.scoped("attempts: failures within the window lock out; hints are rate-limited", () =>
      Effect.gen(function* () {
        const store = yield* make
        assert.strictEqual((yield* store.recordFailure(alice, 0, policy)).failures, 1)
        assert.strictEqual((yield* store.recordFailure(alice, 10, policy)).failures, 2)
        const locked = yield* store.recordFailure(alice, 20, policy)
        assert.strictEqual(locked.lockedUntil, 600_020)
        assert.strictEqual(Option.getOrThrow(yield* store.getAttempts(alice)).lockedUntil, 600_020)
        // an old failure outside the window does not count
        const bob = { ...alice, senderId: "b" }
        yield* store.recordFailure(bob, 0, policy)
        yield* store.recordFailure(bob, 10, policy)
        assert.strictEqual((yield* store.recordFailure(bob, 70_000, policy)).failures, 1)
        yield* store.clearFailures(bob)
        assert.isTrue(Option.isNone(yield* store.getAttempts(bob)))
        assert.isTrue(yield* store.claimHint(bob, 0, 1000))
        assert.isFalse(yield* store.claimHint(bob, 999, 1000))
        assert.isTrue(yield* store.claimHint(bob, 1000, 1000))
        // a hint keeps the lockout
        assert.isTrue(yield* store.claimHint(alice, 30, 1000))
        assert.strictEqual(Option.getOrThrow(yield* store.getAttempts(alice)).lockedUntil, 600_020)
      })
    )

    it.scoped("outbox: idempotent by key; only each conversation's oldest pending delivery is due", () =>
      Effect.gen(function* () {
        const store = yield* make
        assert.deepStrictEqual(
          yield* store.enqueue([delivery("k1"), delivery("k2", 5), delivery("x1", 6, "tg", "c2")]),
          [true, true, true]
        )
        assert.deepStrictEqual(yield* store.enqueue([delivery("k1"), delivery("k3", 7, "other")]), [false, true])
        assert.deepStrictEqual(
          (yield* store.due("tg", 4, 10)).map((d) => d.key),
          ["k1"]
        )
        assert.deepStrictEqual(
          (yield* store.due("tg", 10, 10)).map((d) => d.key),
          ["k1", "x1"]
        )
        assert.deepStrictEqual(
          (yield* store.due("tg", 10, 1)).map((d) => d.key),
          ["k1"]
        )
        // k1 rate limited until 2000: k2 waits behind it, c2 goes on
        yield* store.updateDelivery("k1", { state: "pending", nextAttemptAt: 2000, error: "rate limited" }, 11)
        assert.deepStrictEqual(
          (yield* store.due("tg", 100, 10)).map((d) => d.key),
          ["x1"]
        )
        yield* store.updateDelivery("x1", { state: "sent", platformMessageId: "p", error: null }, 12)
        assert.deepStrictEqual(yield* store.due("tg", 100, 10), [])
        assert.strictEqual(Option.getOrThrow(yield* store.nextDueAt("tg")), 2000)
        assert.deepStrictEqual(
          (yield* store.due("tg", 2000, 10)).map((d) => d.key),
          ["k1"]
        )
        // in flight (unknown), then sent: k2 is next
        yield* store.updateDelivery("k1", { state: "unknown", attempts: 1 }, 2001)
        assert.deepStrictEqual(
          (yield* store.due("tg", 2001, 10)).map((d) => d.key),
          ["k2"]
        )
        yield* store.updateDelivery("k1", { state: "sent", platformMessageId: "pm1", error: null }, 2002)
        const [k1, k2] = yield* store.listDeliveries({ channel: "tg" })
        assert.strictEqual(k1!.state, "sent")
        assert.strictEqual(k1!.attempts, 1)
        assert.strictEqual(k1!.platformMessageId, "pm1")
        assert.strictEqual(k1!.error, null)
        assert.strictEqual(k2!.text, "text k2")
        assert.deepStrictEqual(
          (yield* store.listDeliveries({ state: "sent" })).map((d) => d.key),
          ["k1", "x1"]
        )
        assert.isTrue(Option.isNone(yield* store.nextDueAt("other")) === false)
        assert.isTrue(Option.isNone(yield* store.nextDueAt("nowhere")))
      })
    )

    it.scoped("approval codes: one per approval, a taken code conflicts", () =>
      Effect.gen(function* () {
        const store = yield* make
        const a = {
          code: "ABC123",
          approvalId: "A1",
          channel: "tg",
          conversation: "c",
          principal: "p",
          createdAt: 0,
          expiresAt: 9
        }
        assert.strictEqual((yield* store.putApprovalCode(a)).code, "ABC123")
        assert.strictEqual((yield* store.putApprovalCode({ ...a, code: "ZZZ999" })).code, "ABC123")
        const taken = yield* Effect.either(store.putApprovalCode({ ...a, approvalId: "A2" }))
        assert.isTrue(Either.isLeft(taken) && taken.left._tag === "Conflict")
        assert.strictEqual(Option.getOrThrow(yield* store.getApprovalCode("ABC123")).approvalId, "A1")
      })
    )

    it.scoped("watches and the rejections log", () =>
      Effect.gen(function* () {
        const store = yield* make
        const w = {
          ...alice,
          runId: "R1",
          sessionId: "S1",
          principal: "alice",
          conversation: "c",
          thread: null,
          replyTo: "m",
          createdAt: 1
        }
        yield* store.putWatch(w)
        assert.deepStrictEqual(yield* store.listWatches("tg"), [w])
        yield* store.endWatch("R1")
        assert.deepStrictEqual(yield* store.listWatches("tg"), [])
        yield* store.recordRejection("tg", "not_paired", 1)
        yield* store.recordRejection("tg", "not_paired", 2)
        yield* store.recordRejection("tg", "duplicate", 3)
        const counts = yield* store.rejections("tg")
        assert.deepStrictEqual(counts.map((c) => [c.reason, c.count]).sort(), [
          ["duplicate", 1],
          ["not_paired", 2]
        ])
      })
    )
  })
}

describe("SqliteChannelStore", () => {
  it.scoped("durable across reopen; WAL, STRICT tables; refuses foreign and newer files", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const filename = join(dir, "channels.sqlite")
      yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteChannelStore.make({ filename })
          yield* store.putPairingCode(code(Codes.digest("ABCDEFGH"), { expiresAt: 10_000 }))
          yield* store.claimInbound("tg", "m1", 1)
          yield* store.enqueue([delivery("k1")])
        })
      )
      const store = yield* SqliteChannelStore.make({ filename })
      assert.isFalse(yield* store.claimInbound("tg", "m1", 2))
      assert.isTrue(
        Option.isSome(yield* store.redeemPairingCode({ digest: Codes.digest("ABCDEFGH"), identity: alice, at: 5 }))
      )
      assert.strictEqual((yield* store.listDeliveries({})).length, 1)

      const raw = new Database(filename, { readonly: true })
      assert.strictEqual(raw.pragma("journal_mode", { simple: true }), "wal")
      const tables = raw
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .all() as Array<{
        name: string
        sql: string
      }>
      assert.isAtLeast(tables.length, 8)
      for (const t of tables) assert.match(t.sql, /STRICT/, t.name)
      raw.close()
      // The pairing code itself is nowhere on disk (only its digest is).
      for (const file of [filename, `${filename}-wal`]) {
        if (existsSync(file)) assert.isFalse(readFileSync(file).includes("ABCDEFGH"), file)
      }

      const foreign = join(dir, "journal.sqlite")
      const other = new Database(foreign)
      other.exec("CREATE TABLE tape_events (x INTEGER)")
      other.close()
      const refused = yield* Effect.either(SqliteChannelStore.make({ filename: foreign }))
      assert.isTrue(Either.isLeft(refused) && refused.left._tag === "JournalError")

      const newer = join(dir, "newer.sqlite")
      yield* Effect.scoped(SqliteChannelStore.make({ filename: newer }))
      const bump = new Database(newer)
      bump.pragma("user_version = 99")
      bump.close()
      const tooNew = yield* Effect.either(SqliteChannelStore.make({ filename: newer }))
      assert.isTrue(Either.isLeft(tooNew) && /newer/.test(tooNew.left.message))
    })
  )
})

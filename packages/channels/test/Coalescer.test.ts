import { assert, describe, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { Coalescer } from "../src/index.js"

interface Item {
  readonly key: string
  readonly text: string
  readonly media?: boolean
}

const setup = (options: Partial<Coalescer.Options<Item>> = {}) =>
  Effect.gen(function* () {
    const emitted: Array<string> = []
    const coalescer = yield* Coalescer.make<Item>({
      window: "1 second",
      key: (i) => i.key,
      bypass: (i) => i.text.startsWith("/") || i.media === true,
      merge: (items) => ({ key: items[0].key, text: items.map((i) => i.text).join("\n") }),
      emit: (i) => Effect.sync(() => void emitted.push(`${i.key}:${i.text}`)),
      ...options
    })
    return { coalescer, emitted }
  })

describe("Coalescer (TestClock)", () => {
  it.scoped("quick successive messages merge into one after a quiet window", () =>
    Effect.gen(function* () {
      const { coalescer, emitted } = yield* setup()
      assert.strictEqual(yield* coalescer.offer({ key: "a", text: "hello" }), "buffered")
      yield* TestClock.adjust("600 millis")
      yield* coalescer.offer({ key: "a", text: "are you" })
      yield* TestClock.adjust("600 millis")
      yield* coalescer.offer({ key: "a", text: "there?" })
      yield* TestClock.adjust("999 millis")
      assert.deepStrictEqual(emitted, [])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(emitted, ["a:hello\nare you\nthere?"])
      assert.strictEqual(yield* coalescer.size, 0)
      // a later message starts a new burst
      yield* coalescer.offer({ key: "a", text: "next" })
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(emitted, ["a:hello\nare you\nthere?", "a:next"])
    })
  )

  it.scoped("keys are independent", () =>
    Effect.gen(function* () {
      const { coalescer, emitted } = yield* setup()
      yield* coalescer.offer({ key: "a", text: "1" })
      yield* TestClock.adjust("500 millis")
      yield* coalescer.offer({ key: "b", text: "2" })
      yield* TestClock.adjust("500 millis")
      assert.deepStrictEqual(emitted, ["a:1"])
      yield* TestClock.adjust("500 millis")
      assert.deepStrictEqual(emitted, ["a:1", "b:2"])
    })
  )

  it.scoped("commands and media bypass, after what the key had buffered", () =>
    Effect.gen(function* () {
      const { coalescer, emitted } = yield* setup()
      yield* coalescer.offer({ key: "a", text: "first" })
      yield* coalescer.offer({ key: "b", text: "other" })
      assert.strictEqual(yield* coalescer.offer({ key: "a", text: "/stop" }), "emitted")
      assert.deepStrictEqual(emitted, ["a:first", "a:/stop"])
      assert.strictEqual(yield* coalescer.offer({ key: "b", text: "photo", media: true }), "emitted")
      assert.deepStrictEqual(emitted, ["a:first", "a:/stop", "b:other", "b:photo"])
      // no timer fires later for the flushed keys
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual(emitted.length, 4)
    })
  )

  it.scoped("maxWait caps the delay under a steady stream; maxItems flushes at once", () =>
    Effect.gen(function* () {
      const { coalescer, emitted } = yield* setup({ maxWait: "2 seconds", maxItems: 50 })
      for (let i = 0; i < 5; i++) {
        yield* coalescer.offer({ key: "a", text: String(i) })
        yield* TestClock.adjust("500 millis")
      }
      // the first arrived at 0: emitted at 2 s although the stream never paused
      assert.deepStrictEqual(emitted, ["a:0\n1\n2\n3"])
      const capped = yield* setup({ maxItems: 3 })
      yield* capped.coalescer.offer({ key: "x", text: "1" })
      yield* capped.coalescer.offer({ key: "x", text: "2" })
      assert.strictEqual(yield* capped.coalescer.offer({ key: "x", text: "3" }), "emitted")
      assert.deepStrictEqual(capped.emitted, ["x:1\n2\n3"])
    })
  )

  it.scoped("the number of tracked keys is bounded: a new key past the bound is emitted at once", () =>
    Effect.gen(function* () {
      const { coalescer, emitted } = yield* setup({ maxKeys: 2 })
      yield* coalescer.offer({ key: "a", text: "1" })
      yield* coalescer.offer({ key: "b", text: "2" })
      assert.strictEqual(yield* coalescer.offer({ key: "c", text: "3" }), "emitted")
      assert.strictEqual(yield* coalescer.size, 2)
      // an existing key still buffers
      assert.strictEqual(yield* coalescer.offer({ key: "a", text: "1b" }), "buffered")
      assert.deepStrictEqual(emitted, ["c:3"])
      yield* coalescer.flushAll
      assert.deepStrictEqual(emitted.sort(), ["a:1\n1b", "b:2", "c:3"])
    })
  )

  it.scoped("window 0 turns coalescing off", () =>
    Effect.gen(function* () {
      const { coalescer, emitted } = yield* setup({ window: 0 })
      assert.strictEqual(yield* coalescer.offer({ key: "a", text: "1" }), "emitted")
      assert.deepStrictEqual(emitted, ["a:1"])
    })
  )
})

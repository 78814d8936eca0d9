/**
 * The inbound coalescer: quick successive messages from one sender in one conversation become one
 * run. Each key (channel, conversation, thread, sender) has a debounce window: a message starts or
 * restarts it, and when it passes quietly the buffered messages are merged and emitted. `maxWait`
 * caps how long the first message waits under a steady stream, and `maxItems` how many merge.
 *
 * Commands and media bypass it: whatever is buffered for the key is emitted first, then the
 * bypassing item, so order within a key is kept. The number of keys tracked is bounded
 * (`maxKeys`); when full, a message for a new key is emitted at once rather than buffered, so
 * nothing is dropped and memory stays bounded.
 *
 * Timers run on Effect's `Clock`, so `TestClock` drives them in tests.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, FiberMap, type Scope } from "effect"

/** @since 0.1.0 @category Models */
export interface Options<A> {
  /** The quiet period that ends a burst. `0` turns coalescing off (every item is emitted at once). */
  readonly window: Duration.DurationInput
  /** The longest the first buffered item waits (default 4 × window). */
  readonly maxWait?: Duration.DurationInput | undefined
  /** Keys tracked at once (default 10,000). */
  readonly maxKeys?: number | undefined
  /** Items merged into one at most (default 20). */
  readonly maxItems?: number | undefined
  readonly key: (item: A) => string
  /** Items emitted on their own, at once (commands, media). */
  readonly bypass: (item: A) => boolean
  readonly merge: (items: readonly [A, ...Array<A>]) => A
  /** Where merged items go. Should be quick (e.g. an offer to a queue). */
  readonly emit: (item: A) => Effect.Effect<void>
}

/** @since 0.1.0 @category Models */
export interface Coalescer<A> {
  /** `buffered`: held for the window; `emitted`: passed on now. */
  readonly offer: (item: A) => Effect.Effect<"buffered" | "emitted">
  /** Keys currently holding buffered items. */
  readonly size: Effect.Effect<number>
  /** Emit what is buffered for `key` now (before a command of the same sender, say). */
  readonly flush: (key: string) => Effect.Effect<void>
  /** Emit everything buffered now. */
  readonly flushAll: Effect.Effect<void>
  /** Take everything buffered (merged per key) without emitting it, e.g. to hand it on at shutdown. */
  readonly drain: Effect.Effect<ReadonlyArray<A>>
}

interface Buffer<A> {
  readonly items: [A, ...Array<A>]
  readonly first: number
}

/**
 * A coalescer whose timers live in the current scope (closing it drops what is buffered: call
 * `flushAll` first to keep it).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = <A>(options: Options<A>): Effect.Effect<Coalescer<A>, never, Scope.Scope> =>
  Effect.gen(function* () {
    const window = Duration.toMillis(Duration.decode(options.window))
    const maxWait = options.maxWait === undefined ? window * 4 : Duration.toMillis(Duration.decode(options.maxWait))
    const maxKeys = options.maxKeys ?? 10_000
    const maxItems = options.maxItems ?? 20
    const buffers = new Map<string, Buffer<A>>()
    const timers = yield* FiberMap.make<string>()

    /** Take the key's buffer (synchronously, so it is emitted exactly once) and emit it merged. */
    const release = (key: string) =>
      Effect.suspend(() => {
        const buffer = buffers.get(key)
        if (buffer === undefined) return Effect.void
        buffers.delete(key)
        return options.emit(buffer.items.length === 1 ? buffer.items[0] : options.merge(buffer.items))
      })

    const offer = (item: A): Effect.Effect<"buffered" | "emitted"> =>
      Effect.gen(function* () {
        const key = options.key(item)
        if (window <= 0 || options.bypass(item)) {
          yield* FiberMap.remove(timers, key)
          yield* release(key)
          yield* options.emit(item)
          return "emitted" as const
        }
        const now = yield* Clock.currentTimeMillis
        const existing = buffers.get(key)
        if (existing === undefined && buffers.size >= maxKeys) {
          yield* options.emit(item)
          return "emitted" as const
        }
        const buffer: Buffer<A> =
          existing === undefined ? { items: [item], first: now } : { ...existing, items: [...existing.items, item] }
        buffers.set(key, buffer)
        if (buffer.items.length >= maxItems) {
          yield* FiberMap.remove(timers, key)
          yield* release(key)
          return "emitted" as const
        }
        const delay = Math.max(0, Math.min(window, buffer.first + maxWait - now))
        // A new timer replaces (interrupts) the key's previous one; once a timer's sleep is over,
        // its release cannot be interrupted half-way.
        yield* FiberMap.run(timers, key, Effect.zipRight(Effect.sleep(delay), Effect.uninterruptible(release(key))))
        return "buffered" as const
      })

    return {
      offer,
      size: Effect.sync(() => buffers.size),
      flush: (key) => Effect.zipRight(FiberMap.remove(timers, key), release(key)),
      flushAll: Effect.gen(function* () {
        yield* FiberMap.clear(timers)
        for (const key of [...buffers.keys()]) yield* release(key)
      }),
      drain: Effect.gen(function* () {
        yield* FiberMap.clear(timers)
        const items = [...buffers.values()].map((b) => (b.items.length === 1 ? b.items[0] : options.merge(b.items)))
        buffers.clear()
        return items
      })
    }
  })

/**
 * Branded ULID identifiers. ULIDs sort by creation time and are safe in URLs and file names.
 *
 * Ids are generated through Effect's `Clock` and `Random`, so `TestClock` and a provided `Random`
 * (`Random.make(seed)`) make them deterministic in tests; under the runtime's own `Random` the random
 * part comes from `crypto.getRandomValues` (see `ulid`). They are monotonic (the ULID spec's monotonic mode): every id sorts after
 * the one made before it with the same `Clock`, also within one millisecond (the random part of the
 * last id is incremented) and when the clock steps back (the last time is kept). The live clock is
 * one per process, so journals that list records `ORDER BY id` list them in creation order; each
 * `TestClock` starts its own sequence, so tests do not see each other's ids.
 *
 * @since 0.1.0
 */
import { Clock, Context, Effect, Either, Random, Schema } from "effect"
import { InvalidArgument } from "./Errors.js"

const ULID_PATTERN = /^[0-9A-HJKMNP-TV-Z]{26}$/
const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

const ulidString = (kind: string) =>
  Schema.String.pipe(
    Schema.pattern(ULID_PATTERN, { message: () => `${kind} must be a 26-character ULID (Crockford base32)` })
  )

/** @since 0.1.0 @category Ids */
export const SessionId = ulidString("SessionId").pipe(Schema.brand("SessionId"))
/** @since 0.1.0 @category Ids */
export type SessionId = typeof SessionId.Type
/** @since 0.1.0 @category Ids */
export const RunId = ulidString("RunId").pipe(Schema.brand("RunId"))
/** @since 0.1.0 @category Ids */
export type RunId = typeof RunId.Type
/** @since 0.1.0 @category Ids */
export const ApprovalId = ulidString("ApprovalId").pipe(Schema.brand("ApprovalId"))
/** @since 0.1.0 @category Ids */
export type ApprovalId = typeof ApprovalId.Type
/** @since 0.1.0 @category Ids */
export const ToolCallId = ulidString("ToolCallId").pipe(Schema.brand("ToolCallId"))
/** @since 0.1.0 @category Ids */
export type ToolCallId = typeof ToolCallId.Type

/** Encodes a millisecond timestamp and 80 random bits as a ULID. @since 0.1.0 @category Ids */
export const encodeUlid = (timeMs: number, random: ReadonlyArray<number>): string => {
  let time = ""
  let t = Math.max(0, Math.floor(timeMs))
  for (let i = 0; i < 10; i++) {
    time = CROCKFORD[t % 32] + time
    t = Math.floor(t / 32)
  }
  let rand = ""
  for (let i = 0; i < 16; i++) rand += CROCKFORD[(random[i] ?? 0) & 31]
  return time + rand
}

/** The last id made with a clock: its time and its 16 random base32 digits. */
interface Last {
  readonly time: number
  readonly random: ReadonlyArray<number>
}

const lastByClock = new WeakMap<Clock.Clock, Last>()

/** The random digits plus one (base 32, carrying), or `undefined` when they are all at 31. */
const increment = (digits: ReadonlyArray<number>): ReadonlyArray<number> | undefined => {
  const next = [...digits]
  for (let i = next.length - 1; i >= 0; i--) {
    if (next[i]! < 31) {
      next[i] = next[i]! + 1
      return next
    }
    next[i] = 0
  }
  return undefined
}

/** 80 random bits from four draws of 20 bits each, as 16 base32 digits. */
const randomDigits = Effect.gen(function* () {
  const random: Array<number> = []
  for (let i = 0; i < 4; i++) {
    const r = yield* Random.nextIntBetween(0, 1 << 20)
    random.push((r >> 15) & 31, (r >> 10) & 31, (r >> 5) & 31, r & 31)
  }
  return random
})

/**
 * The next id of `clock`'s sequence, given fresh random digits. Synchronous, so two fibers can never
 * read the same last id.
 */
const nextUlid = (clock: Clock.Clock, fresh: ReadonlyArray<number>): string => {
  const now = Math.max(0, Math.floor(clock.unsafeCurrentTimeMillis()))
  const last = lastByClock.get(clock)
  const incremented = last !== undefined && now <= last.time ? increment(last.random) : undefined
  const next: Last =
    last === undefined || now > last.time
      ? { time: now, random: fresh }
      : incremented !== undefined
        ? { time: last.time, random: incremented }
        : { time: last.time + 1, random: fresh } // 2^80 ids in one millisecond: borrow the next one
  lastByClock.set(clock, next)
  return encodeUlid(next.time, next.random)
}

/** The `Random` a runtime has when none was provided (seeded from `Math.random` at start-up). */
const liveRandom = Effect.runSync(Effect.random)

/** Random bytes drawn from the platform's CSPRNG in batches (one `getRandomValues` per 256 ids). */
const pool = new Uint8Array(16 * 256)
let poolAt = pool.length

/** 16 random base32 digits from the pool (a byte's low 5 bits: 256 is a multiple of 32, so uniform). */
const cryptoDigits = (): ReadonlyArray<number> => {
  if (poolAt === pool.length) {
    globalThis.crypto.getRandomValues(pool)
    poolAt = 0
  }
  const digits: Array<number> = new Array(16)
  for (let i = 0; i < 16; i++) digits[i] = pool[poolAt + i]! & 31
  poolAt += 16
  return digits
}

/**
 * A fresh ULID from the current `Clock` and `Random`, monotonic per clock (see the module notes).
 *
 * One fiber-runtime read for both services. Under the runtime's own `Random` (nobody provided one,
 * so nobody can replay its draws) the random part comes synchronously from `crypto.getRandomValues`
 * instead of four `Random.nextIntBetween` draws (~15 fiber steps per id on the loop's hot path); a
 * provided `Random` (`Random.make(seed)` in tests) is drawn from as before, so seeded ids repeat.
 *
 * @since 0.1.0
 * @category Ids
 */
export const ulid: Effect.Effect<string> = Effect.withFiberRuntime((fiber) => {
  const services = fiber.currentDefaultServices
  const clock = Context.get(services, Clock.Clock)
  return Context.get(services, Random.Random) === liveRandom
    ? Effect.succeed(nextUlid(clock, cryptoDigits()))
    : Effect.map(randomDigits, (fresh) => nextUlid(clock, fresh))
})

/** @since 0.1.0 @category Ids */
export const makeSessionId = ulid as Effect.Effect<SessionId>
/** @since 0.1.0 @category Ids */
export const makeRunId = ulid as Effect.Effect<RunId>
/** @since 0.1.0 @category Ids */
export const makeApprovalId = ulid as Effect.Effect<ApprovalId>
/** @since 0.1.0 @category Ids */
export const makeToolCallId = ulid as Effect.Effect<ToolCallId>

/**
 * Parse an id supplied by a client: the branded id, or `InvalidArgument` naming the field.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const parse = <A>(
  schema: Schema.Schema<A, string>,
  value: unknown,
  field: string
): Effect.Effect<A, InvalidArgument> =>
  Either.match(Schema.decodeUnknownEither(schema)(value), {
    onLeft: () => Effect.fail(new InvalidArgument({ message: `${field} must be a 26-character ULID`, field })),
    onRight: Effect.succeed
  })

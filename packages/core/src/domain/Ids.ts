/**
 * Branded ULID identifiers. ULIDs sort by creation time and are safe in URLs and file names.
 *
 * Ids are generated through Effect's `Clock` and `Random`, so `TestClock`/`TestRandom` make them
 * deterministic in tests.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Either, Random, Schema } from "effect"
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

/** A fresh ULID from the current `Clock` and `Random`. @since 0.1.0 @category Ids */
export const ulid: Effect.Effect<string> = Effect.gen(function* () {
  const now = yield* Clock.currentTimeMillis
  // 80 random bits from four draws of 20 bits each (16 base32 digits).
  const random: Array<number> = []
  for (let i = 0; i < 4; i++) {
    const r = yield* Random.nextIntBetween(0, 1 << 20)
    random.push((r >> 15) & 31, (r >> 10) & 31, (r >> 5) & 31, r & 31)
  }
  return encodeUlid(now, random)
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

/**
 * A channel's admission settings, as the router applies them. Every field has a safe default: DMs
 * need pairing, groups need a mention and a paired sender, each sender of a shared conversation
 * gets a private session, and broadcasts (`@everyone`, `@here`) never address the bot.
 *
 * @since 0.1.0
 */
import { Duration } from "effect"

/** @since 0.1.0 @category Models */
export type DmPolicy = "deny" | "pairing" | "allow"
/** @since 0.1.0 @category Models */
export type GroupPolicy = "paired" | "allow"
/** @since 0.1.0 @category Models */
export type BroadcastStrategy = "deny" | "mentionOnly" | "allow"

/** @since 0.1.0 @category Models */
export interface ChannelSettings {
  /** The channel's name (`InboundMessage.channel`). */
  readonly name: string
  readonly enabled?: boolean | undefined
  /** Words that address the bot in a group, matched on identifier boundaries (e.g. `@mybot`). */
  readonly mentionPatterns?: ReadonlyArray<string> | undefined
  /** Platform ids or names that, in `InboundMessage.mentions`, mean the bot was mentioned. */
  readonly mentionIds?: ReadonlyArray<string> | undefined
  /** Group messages must mention the bot (default true). */
  readonly requireMention?: boolean | undefined
  /** Only these senders (ids, or `@handles`) may talk to the bot; empty: everyone (default). */
  readonly allowFrom?: ReadonlyArray<string> | undefined
  /** These senders never may (checked first). */
  readonly denyFrom?: ReadonlyArray<string> | undefined
  /** Direct messages: refused, from paired senders only (default), or from anyone (a principal per identity). */
  readonly dmPolicy?: DmPolicy | undefined
  /** Group messages: from paired senders only (default), or from anyone. */
  readonly groupPolicy?: GroupPolicy | undefined
  /** Each sender in a shared conversation gets a private session (default true). */
  readonly isolateSessionBySender?: boolean | undefined
  /** How `@everyone`/`@here` count: never (rejected), only beside a real mention (default), or as a mention. */
  readonly broadcast?: BroadcastStrategy | undefined
  /** Put before every reply. */
  readonly responsePrefix?: string | undefined
  /** How people write commands on the platform, in the bot's own messages (default `/`; Slack's connector says `!`). */
  readonly commandPrefix?: string | undefined
  /** Runs of this channel at once (default 4). */
  readonly maxConcurrent?: number | undefined
  /** Admitted messages waiting for a run slot (default 64); more are rejected `queue_full`. */
  readonly maxQueue?: number | undefined
  /** Longest message accepted, in characters (default 4,000). */
  readonly maxTextChars?: number | undefined
  /** Accept senders the platform does not vouch for (default false). */
  readonly allowUnverified?: boolean | undefined
  /** Chat commands (`/status`, `/stop`, …) (default true). */
  readonly commands?: boolean | undefined
  readonly coalesce?:
    | {
        /** Quiet period that ends a burst (default 1.5 seconds; 0 turns coalescing off). */
        readonly window?: Duration.DurationInput | undefined
        readonly maxWait?: Duration.DurationInput | undefined
        readonly maxKeys?: number | undefined
        readonly maxItems?: number | undefined
      }
    | undefined
  readonly pairing?:
    | {
        /** How long a minted code stays valid (default 10 minutes). */
        readonly codeTtl?: Duration.DurationInput | undefined
        /** Wrong codes allowed per sender within `failureWindow` before a lockout (default 5). */
        readonly maxFailures?: number | undefined
        readonly failureWindow?: Duration.DurationInput | undefined
        readonly lockout?: Duration.DurationInput | undefined
        /** At most one "how to pair" reply per sender per this interval (default 1 hour). */
        readonly hintInterval?: Duration.DurationInput | undefined
        /** How long a binding made by a code lasts (default: until revoked). */
        readonly bindingTtl?: Duration.DurationInput | undefined
        /**
         * Wrong codes allowed on the whole channel (all senders together) within
         * `channelFailureWindow` before every pairing attempt on it is refused for
         * `channelLockout` (default 20 per 15 minutes, refused for 15 minutes).
         */
        readonly channelMaxFailures?: number | undefined
        readonly channelFailureWindow?: Duration.DurationInput | undefined
        readonly channelLockout?: Duration.DurationInput | undefined
      }
    | undefined
}

/** Settings with every default applied. @since 0.1.0 @category Models */
export interface Resolved {
  readonly name: string
  readonly enabled: boolean
  readonly mentionPatterns: ReadonlyArray<string>
  readonly mentionIds: ReadonlyArray<string>
  readonly requireMention: boolean
  readonly allowFrom: ReadonlyArray<string>
  readonly denyFrom: ReadonlyArray<string>
  readonly dmPolicy: DmPolicy
  readonly groupPolicy: GroupPolicy
  readonly isolateSessionBySender: boolean
  readonly broadcast: BroadcastStrategy
  readonly responsePrefix: string
  readonly commandPrefix: string
  readonly maxConcurrent: number
  readonly maxQueue: number
  readonly maxTextChars: number
  readonly allowUnverified: boolean
  readonly commands: boolean
  readonly coalesce: {
    readonly windowMs: number
    readonly maxWaitMs: number
    readonly maxKeys: number
    readonly maxItems: number
  }
  readonly pairing: {
    readonly codeTtlMs: number
    readonly maxFailures: number
    readonly failureWindowMs: number
    readonly lockoutMs: number
    readonly hintIntervalMs: number
    readonly bindingTtlMs: number | null
    readonly channelMaxFailures: number
    readonly channelFailureWindowMs: number
    readonly channelLockoutMs: number
  }
}

const ms = (d: Duration.DurationInput) => Duration.toMillis(Duration.decode(d))
const atLeast = (n: number | undefined, min: number, fallback: number) =>
  n === undefined || !Number.isFinite(n) ? fallback : Math.max(min, Math.floor(n))

/** Apply the defaults. @since 0.1.0 @category Constructors */
export const resolve = (s: ChannelSettings): Resolved => {
  const windowMs = ms(s.coalesce?.window ?? "1500 millis")
  return {
    name: s.name,
    enabled: s.enabled ?? true,
    mentionPatterns: s.mentionPatterns ?? [],
    mentionIds: (s.mentionIds ?? []).map((m) => m.toLowerCase()),
    requireMention: s.requireMention ?? true,
    allowFrom: s.allowFrom ?? [],
    denyFrom: s.denyFrom ?? [],
    dmPolicy: s.dmPolicy ?? "pairing",
    groupPolicy: s.groupPolicy ?? "paired",
    isolateSessionBySender: s.isolateSessionBySender ?? true,
    broadcast: s.broadcast ?? "mentionOnly",
    responsePrefix: s.responsePrefix ?? "",
    commandPrefix: s.commandPrefix ?? "/",
    maxConcurrent: atLeast(s.maxConcurrent, 1, 4),
    maxQueue: atLeast(s.maxQueue, 1, 64),
    maxTextChars: atLeast(s.maxTextChars, 1, 4000),
    allowUnverified: s.allowUnverified ?? false,
    commands: s.commands ?? true,
    coalesce: {
      windowMs,
      maxWaitMs: ms(s.coalesce?.maxWait ?? windowMs * 4),
      maxKeys: atLeast(s.coalesce?.maxKeys, 1, 10_000),
      maxItems: atLeast(s.coalesce?.maxItems, 1, 20)
    },
    pairing: {
      codeTtlMs: ms(s.pairing?.codeTtl ?? "10 minutes"),
      maxFailures: atLeast(s.pairing?.maxFailures, 1, 5),
      failureWindowMs: ms(s.pairing?.failureWindow ?? "15 minutes"),
      lockoutMs: ms(s.pairing?.lockout ?? "15 minutes"),
      hintIntervalMs: ms(s.pairing?.hintInterval ?? "1 hour"),
      bindingTtlMs: s.pairing?.bindingTtl === undefined ? null : ms(s.pairing.bindingTtl),
      channelMaxFailures: atLeast(s.pairing?.channelMaxFailures, 1, 20),
      channelFailureWindowMs: ms(s.pairing?.channelFailureWindow ?? "15 minutes"),
      channelLockoutMs: ms(s.pairing?.channelLockout ?? "15 minutes")
    }
  }
}

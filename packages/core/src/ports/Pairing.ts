/**
 * The `Pairing` port: how an operator pairs chat-platform identities with principals, from the CLI
 * or the HTTP API. `@palyra/channels` implements it when channels are configured; without channels
 * transports use `unconfigured`, which still checks the caller first.
 *
 * Every method takes the `Caller` and is **operator-only**, checked by the implementation (a
 * non-operator gets `PermissionDenied`). Codes are shown once, at mint: the implementation stores
 * only a digest, and lists codes by an `id` derived from it, which `revoke` also accepts.
 *
 * @since 0.1.0
 */
import { Context, Effect, Option } from "effect"
import type { Caller } from "../domain/Caller.js"
import { Conflict, type InvalidArgument, type JournalError, type NotFound, PermissionDenied } from "../domain/Errors.js"

/** @since 0.1.0 @category Models */
export interface MintRequest {
  /** The channel (its `[[channels]]` name) where the code may be used. */
  readonly channel: string
  /** The principal the code binds the identity that sends it to. */
  readonly principal: string
  /** How long the code stays valid (default: the channel's, 10 minutes). */
  readonly ttlSeconds?: number | undefined
  /** How long the binding it makes lasts (default: the channel's, or until revoked). */
  readonly bindingTtlSeconds?: number | undefined
}

/** A code as listed (never the code itself). @since 0.1.0 @category Models */
export interface CodeInfo {
  /** Stable id of the code (from its digest): what `revoke` takes when the code is not at hand. */
  readonly id: string
  readonly channel: string
  readonly principal: string
  readonly createdBy: string
  readonly createdAt: number
  readonly expiresAt: number
  readonly bindingTtlSeconds: number | null
  readonly status: "active" | "used" | "expired" | "revoked"
}

/** A freshly minted code: the only time the code is shown. @since 0.1.0 @category Models */
export interface Minted extends CodeInfo {
  readonly code: string
}

/** A platform identity paired with a principal. @since 0.1.0 @category Models */
export interface Identity {
  /** Opaque id (URL-safe) for `unpair`. */
  readonly id: string
  readonly channel: string
  readonly account: string
  readonly senderId: string
  readonly principal: string
  readonly createdAt: number
  /** `pairing-code`, or the operator who bound it. */
  readonly createdBy: string
  readonly expiresAt: number | null
  readonly revokedAt: number | null
  readonly active: boolean
}

/** @since 0.1.0 @category Models */
export type PairingError = JournalError | PermissionDenied | InvalidArgument | NotFound | Conflict

/** @since 0.1.0 @category Models */
export interface Service {
  readonly mint: (caller: Caller, request: MintRequest) => Effect.Effect<Minted, PairingError>
  /** Codes, newest first (used, expired and revoked ones too, until they are pruned). */
  readonly list: (
    caller: Caller,
    filter?: { readonly channel?: string | undefined }
  ) => Effect.Effect<ReadonlyArray<CodeInfo>, PairingError>
  /** Revoke an unused code, by the code itself or its `id`. */
  readonly revoke: (caller: Caller, codeOrId: string) => Effect.Effect<CodeInfo, PairingError>
  /** Paired identities (revoked and expired ones too, marked). */
  readonly listIdentities: (
    caller: Caller,
    filter?: { readonly channel?: string | undefined; readonly principal?: string | undefined }
  ) => Effect.Effect<ReadonlyArray<Identity>, PairingError>
  /** Revoke an identity's binding: its next message is treated as a stranger's. */
  readonly unpair: (caller: Caller, id: string) => Effect.Effect<Identity, PairingError>
}

/** @since 0.1.0 @category Tags */
export class Pairing extends Context.Tag("@palyra/core/Pairing")<Pairing, Service>() {}

/**
 * What transports answer when no implementation is present (no `[[channels]]` configured).
 *
 * @since 0.1.0
 * @category Errors
 */
export const notConfigured = (): Conflict =>
  new Conflict({ message: "channels are not configured: add a [[channels]] entry to palyra.toml to pair identities" })

const refuse = (caller: Caller): Effect.Effect<never, Conflict | PermissionDenied> =>
  caller.operator
    ? Effect.fail(notConfigured())
    : Effect.fail(new PermissionDenied({ message: "pairing needs an operator" }))

/**
 * The port without channels: a non-operator is refused exactly as by a configured implementation;
 * an operator learns why nothing can be paired (`notConfigured`).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const unconfigured: Service = {
  mint: refuse,
  list: refuse,
  revoke: refuse,
  listIdentities: refuse,
  unpair: refuse
}

/**
 * The context's implementation, or `unconfigured` when there is none: what every transport calls.
 *
 * @since 0.1.0
 * @category Accessors
 */
export const current: Effect.Effect<Service> = Effect.map(
  Effect.serviceOption(Pairing),
  Option.getOrElse(() => unconfigured)
)

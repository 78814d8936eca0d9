/**
 * Pairing, the operator's side: mint single-use codes that bind a platform identity to a principal,
 * bind or revoke identities directly, and list bindings. (The chat side — a user sending the code in
 * a DM — is the router's.)
 *
 * Authorization follows the Gateway's rule: an operator may act for every principal, anyone else
 * only for its own. Codes are 8 Crockford base32 characters from `crypto.randomBytes` (40 bits),
 * stored only as a SHA-256 digest, valid for 10 minutes by default, single use; wrong guesses are
 * limited per sender by the router's lockout.
 *
 * @since 0.1.0
 */
import { Caller, Errors, type Pairing as PairingPort } from "@palyra/core"
import { Clock, Context, Duration, Effect, Layer, Option } from "effect"
import { type Binding, ChannelStore, isActive, type PairingCode } from "./ChannelStore.js"
import * as Codes from "./Codes.js"
import { IDENTITY_PRINCIPAL_PREFIX, type Identity } from "./SessionKey.js"
import { type ChannelSettings, type Resolved, resolve } from "./Settings.js"

/** @since 0.1.0 @category Models */
export interface MintRequest {
  readonly channel: string
  /** The principal the code binds to (default: the caller's). */
  readonly principal?: string | undefined
  /** How long the code stays valid (default: the channel's `pairing.codeTtl`, 10 minutes). */
  readonly ttl?: Duration.DurationInput | undefined
  /** How long the binding it makes lasts (default: the channel's `pairing.bindingTtl`, or until revoked). */
  readonly bindingTtl?: Duration.DurationInput | undefined
}

/** @since 0.1.0 @category Models */
export interface Minted {
  /** Show it to the person once; it is not stored. */
  readonly code: string
  readonly channel: string
  readonly principal: string
  readonly expiresAt: number
}

type Failure = Errors.JournalError | Errors.PermissionDenied | Errors.InvalidArgument | Errors.NotFound

/** @since 0.1.0 @category Models */
export interface Service {
  readonly mint: (caller: Caller.Caller, request: MintRequest) => Effect.Effect<Minted, Failure>
  /** Bind an identity to a principal without a code (operators only). */
  readonly bind: (
    caller: Caller.Caller,
    request: { readonly identity: Identity; readonly principal: string; readonly ttl?: Duration.DurationInput }
  ) => Effect.Effect<Binding, Failure>
  /** Revoke an identity's binding (its principal or an operator). */
  readonly revoke: (caller: Caller.Caller, identity: Identity) => Effect.Effect<Binding, Failure>
  /** Bindings the caller may see: its own, or everyone's for operators. */
  readonly list: (
    caller: Caller.Caller,
    filter?: { readonly channel?: string | undefined }
  ) => Effect.Effect<ReadonlyArray<Binding>, Failure>
}

/** @since 0.1.0 @category Tags */
export class Pairing extends Context.Tag("@palyra/channels/Pairing")<Pairing, Service>() {}

/** Why `principal` cannot be bound, if it cannot. @since 0.1.0 @category Validation */
export const checkPrincipal = (principal: string): Errors.InvalidArgument | undefined => {
  if (principal.length === 0 || principal.length > 256 || principal.trim() !== principal) {
    return new Errors.InvalidArgument({
      message: "principal must be 1–256 characters without surrounding spaces",
      field: "principal"
    })
  }
  if (principal.startsWith(IDENTITY_PRINCIPAL_PREFIX)) {
    return new Errors.InvalidArgument({
      message: `principals starting with "${IDENTITY_PRINCIPAL_PREFIX}" are reserved for unpaired platform identities`,
      field: "principal"
    })
  }
  return undefined
}

const ms = (d: Duration.DurationInput) => Duration.toMillis(Duration.decode(d))

/** @since 0.1.0 @category Constructors */
export const make = (channels: ReadonlyArray<ChannelSettings>): Effect.Effect<Service, never, ChannelStore> =>
  Effect.gen(function* () {
    const store = yield* ChannelStore
    const settings = new Map<string, Resolved>(channels.map((c) => [c.name, resolve(c)]))
    const channelOf = (name: string) => {
      const s = settings.get(name)
      return s === undefined || !s.enabled
        ? Effect.fail(new Errors.NotFound({ entity: "channel", id: name }))
        : Effect.succeed(s)
    }
    const authorize = (caller: Caller.Caller, principal: string) => {
      const invalid = checkPrincipal(principal)
      if (invalid) return Effect.fail(invalid)
      return Caller.owns(caller, principal)
        ? Effect.void
        : Effect.fail(
            new Errors.PermissionDenied({ message: "only an operator may pair an identity to another principal" })
          )
    }

    const mint = Effect.fn("Pairing.mint")(function* (caller: Caller.Caller, request: MintRequest) {
      const channel = yield* channelOf(request.channel)
      const principal = request.principal ?? caller.principal
      yield* authorize(caller, principal)
      const now = yield* Clock.currentTimeMillis
      const expiresAt = now + (request.ttl === undefined ? channel.pairing.codeTtlMs : ms(request.ttl))
      const bindingTtlMs = request.bindingTtl === undefined ? channel.pairing.bindingTtlMs : ms(request.bindingTtl)
      // 40 random bits: a collision is astronomically unlikely, but a taken digest just draws again.
      for (let i = 0; ; i++) {
        const code = Codes.pairingCode()
        const put = yield* Effect.either(
          store.putPairingCode({
            digest: Codes.digest(code),
            channel: channel.name,
            principal,
            createdBy: caller.principal,
            createdAt: now,
            expiresAt,
            bindingTtlMs,
            usedAt: null
          })
        )
        if (put._tag === "Right") return { code, channel: channel.name, principal, expiresAt }
        if (put.left._tag !== "Conflict" || i >= 4) {
          return yield* put.left._tag === "Conflict"
            ? new Errors.JournalError({ method: "Pairing.mint", message: "could not draw a free code" })
            : put.left
        }
      }
    })

    const service: Service = {
      mint,
      bind: (caller, request) =>
        Effect.gen(function* () {
          if (!caller.operator) {
            return yield* new Errors.PermissionDenied({
              message: "binding an identity without a code needs an operator"
            })
          }
          yield* channelOf(request.identity.channel)
          yield* authorize(caller, request.principal)
          const now = yield* Clock.currentTimeMillis
          const binding: Binding = {
            channel: request.identity.channel,
            account: request.identity.account,
            senderId: request.identity.senderId,
            principal: request.principal,
            createdAt: now,
            createdBy: caller.principal,
            expiresAt: request.ttl === undefined ? null : now + ms(request.ttl),
            revokedAt: null
          }
          yield* store.putBinding(binding)
          return binding
        }),
      revoke: (caller, identity) =>
        Effect.gen(function* () {
          const now = yield* Clock.currentTimeMillis
          const current = yield* store.getBinding(identity, now)
          // What the caller may not see answers like what does not exist.
          if (Option.isNone(current) || !Caller.owns(caller, current.value.principal)) {
            return yield* new Errors.NotFound({ entity: "binding", id: `${identity.channel}/${identity.senderId}` })
          }
          const revoked = yield* store.revokeBinding(identity, now)
          return Option.getOrElse(revoked, () => ({ ...current.value, revokedAt: now }))
        }),
      list: (caller, filter = {}) => store.listBindings({ channel: filter.channel, principal: Caller.scope(caller) })
    }
    return service
  })

/** @since 0.1.0 @category Layers */
export const layer = (channels: ReadonlyArray<ChannelSettings>): Layer.Layer<Pairing, never, ChannelStore> =>
  Layer.effect(Pairing, make(channels))

const CODE_ID = /^[0-9a-f]{16}$/
const MAX_TTL_SECONDS = 366 * 24 * 3600

/** The listed id of a code: the first 16 hex digits of its digest. @since 0.1.0 @category Admin */
export const codeId = (digest: string): string => digest.slice(0, 16)

/** The opaque, URL-safe id of a paired identity. @since 0.1.0 @category Admin */
export const identityId = (i: Identity): string =>
  Buffer.from(JSON.stringify([i.channel, i.account, i.senderId]), "utf8").toString("base64url")

/** The identity an id names, if it names one. @since 0.1.0 @category Admin */
export const parseIdentityId = (id: string): Identity | undefined => {
  if (!/^[A-Za-z0-9_-]{1,1400}$/.test(id)) return undefined
  try {
    const parsed: unknown = JSON.parse(Buffer.from(id, "base64url").toString("utf8"))
    if (Array.isArray(parsed) && parsed.length === 3) {
      const [channel, account, senderId] = parsed as Array<unknown>
      if (typeof channel === "string" && typeof account === "string" && typeof senderId === "string") {
        return { channel, account, senderId }
      }
    }
  } catch {
    // not an id of ours
  }
  return undefined
}

const codeInfo = (c: PairingCode, now: number): PairingPort.CodeInfo => ({
  id: codeId(c.digest),
  channel: c.channel,
  principal: c.principal,
  createdBy: c.createdBy,
  createdAt: c.createdAt,
  expiresAt: c.expiresAt,
  bindingTtlSeconds: c.bindingTtlMs === null ? null : Math.round(c.bindingTtlMs / 1000),
  status:
    (c.revokedAt ?? null) !== null ? "revoked" : c.usedAt !== null ? "used" : c.expiresAt <= now ? "expired" : "active"
})

const identityInfo = (b: Binding, now: number): PairingPort.Identity => ({
  id: identityId(b),
  channel: b.channel,
  account: b.account,
  senderId: b.senderId,
  principal: b.principal,
  createdAt: b.createdAt,
  createdBy: b.createdBy,
  expiresAt: b.expiresAt,
  revokedAt: b.revokedAt,
  active: isActive(b, now)
})

const seconds = (field: string, value: number | undefined) =>
  value === undefined
    ? Effect.succeed(undefined)
    : Number.isInteger(value) && value > 0 && value <= MAX_TTL_SECONDS
      ? Effect.succeed(Duration.seconds(value))
      : Effect.fail(
          new Errors.InvalidArgument({
            message: `${field} must be a whole number of seconds in 1..${MAX_TTL_SECONDS}`,
            field
          })
        )

/**
 * The operator's pairing service for the CLI and the HTTP API (core's `Pairing` port), over this
 * package's pairing and store. Every method is operator-only.
 *
 * @since 0.1.0
 * @category Admin
 */
export const makeAdmin = (pairing: Service): Effect.Effect<PairingPort.Service, never, ChannelStore> =>
  Effect.gen(function* () {
    const store = yield* ChannelStore
    const operatorOnly = (caller: Caller.Caller, what: string) =>
      caller.operator ? Effect.void : Effect.fail(new Errors.PermissionDenied({ message: `${what} needs an operator` }))
    const findCode = (codeOrId: string) =>
      Effect.gen(function* () {
        const code = Codes.normalize(codeOrId, 8)
        if (code !== undefined) return Option.some(Codes.digest(code))
        if (!CODE_ID.test(codeOrId)) return Option.none<string>()
        const all = yield* store.listPairingCodes({})
        return Option.fromNullable(all.find((c) => codeId(c.digest) === codeOrId)?.digest)
      })

    return {
      mint: Effect.fn("Pairing.admin.mint")(function* (caller: Caller.Caller, request: PairingPort.MintRequest) {
        yield* operatorOnly(caller, "minting a pairing code")
        const ttl = yield* seconds("ttlSeconds", request.ttlSeconds)
        const bindingTtl = yield* seconds("bindingTtlSeconds", request.bindingTtlSeconds)
        const minted = yield* pairing.mint(caller, {
          channel: request.channel,
          principal: request.principal,
          ttl,
          bindingTtl
        })
        const now = yield* Clock.currentTimeMillis
        const stored = yield* store.listPairingCodes({ channel: minted.channel })
        const digest = Codes.digest(minted.code)
        const info = stored.find((c) => c.digest === digest)
        yield* Effect.logInfo("pairing code minted").pipe(
          Effect.annotateLogs({ channel: minted.channel, principal: minted.principal, by: caller.principal })
        )
        return {
          ...(info === undefined
            ? {
                id: codeId(digest),
                channel: minted.channel,
                principal: minted.principal,
                createdBy: caller.principal,
                createdAt: now,
                expiresAt: minted.expiresAt,
                bindingTtlSeconds: null,
                status: "active" as const
              }
            : codeInfo(info, now)),
          code: minted.code
        }
      }),
      list: (caller, filter = {}) =>
        Effect.gen(function* () {
          yield* operatorOnly(caller, "listing pairing codes")
          const now = yield* Clock.currentTimeMillis
          return (yield* store.listPairingCodes({ channel: filter.channel })).map((c) => codeInfo(c, now))
        }),
      revoke: Effect.fn("Pairing.admin.revoke")(function* (caller: Caller.Caller, codeOrId: string) {
        yield* operatorOnly(caller, "revoking a pairing code")
        const now = yield* Clock.currentTimeMillis
        const digest = yield* findCode(codeOrId.trim())
        const revoked = Option.isNone(digest) ? Option.none() : yield* store.revokePairingCode(digest.value, now)
        if (Option.isNone(revoked)) {
          return yield* new Errors.NotFound({
            entity: "unused pairing code",
            id: CODE_ID.test(codeOrId) ? codeOrId : "(given)"
          })
        }
        return codeInfo(revoked.value, now)
      }),
      listIdentities: (caller, filter = {}) =>
        Effect.gen(function* () {
          yield* operatorOnly(caller, "listing paired identities")
          const now = yield* Clock.currentTimeMillis
          const all = yield* store.listBindings({ channel: filter.channel, principal: filter.principal })
          return all.map((b) => identityInfo(b, now))
        }),
      unpair: Effect.fn("Pairing.admin.unpair")(function* (caller: Caller.Caller, id: string) {
        yield* operatorOnly(caller, "unpairing an identity")
        const identity = parseIdentityId(id)
        if (identity === undefined) return yield* new Errors.NotFound({ entity: "paired identity", id })
        const now = yield* Clock.currentTimeMillis
        const revoked = yield* pairing.revoke(caller, identity)
        yield* Effect.logInfo("identity unpaired").pipe(
          Effect.annotateLogs({ channel: identity.channel, principal: revoked.principal, by: caller.principal })
        )
        return identityInfo(revoked, now)
      })
    } satisfies PairingPort.Service
  })

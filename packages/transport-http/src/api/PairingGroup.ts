/**
 * The `pairing` group: an operator pairs chat-platform identities with principals (core's `Pairing`
 * port, implemented by `@palyra/channels`). Every route is operator-only (checked in the
 * implementation: others get 403 `permission_denied`); without `[[channels]]` every route answers
 * 409 `conflict` ("channels are not configured").
 *
 * - `POST /v1/pairing/codes` mints a code: the only answer that carries the code itself.
 * - `GET /v1/pairing/codes` lists codes by id and status (`active | used | expired | revoked`).
 * - `DELETE /v1/pairing/codes/:code` revokes an unused code, by the code or its id.
 * - `GET /v1/pairing/identities` lists paired identities; `DELETE /v1/pairing/identities/:id` unpairs one.
 *
 * The group's errors and security are added where the API is assembled (`Api.ts`), so this file
 * does not import it.
 *
 * @since 0.1.0
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"

const ChannelName = Schema.String.pipe(Schema.pattern(/^[a-z0-9][a-z0-9_-]{0,63}$/))
const Principal = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))
const Seconds = Schema.Int.pipe(Schema.between(1, 366 * 24 * 3600))

/** @since 0.1.0 @category Payloads */
export const MintPayload = Schema.Struct({
  channel: ChannelName,
  principal: Principal,
  /** How long the code stays valid (default: the channel's, 10 minutes). */
  ttlSeconds: Schema.optional(Seconds),
  /** How long the binding it makes lasts (default: the channel's, or until revoked). */
  bindingTtlSeconds: Schema.optional(Seconds)
}).annotations({ identifier: "PairingMintRequest" })

/** @since 0.1.0 @category Schemas */
export const PairingCode = Schema.Struct({
  id: Schema.String,
  channel: Schema.String,
  principal: Schema.String,
  createdBy: Schema.String,
  createdAt: Schema.Number,
  expiresAt: Schema.Number,
  bindingTtlSeconds: Schema.NullOr(Schema.Number),
  status: Schema.Literal("active", "used", "expired", "revoked")
}).annotations({ identifier: "PairingCode" })
/** @since 0.1.0 @category Schemas */
export type PairingCode = typeof PairingCode.Type

/** @since 0.1.0 @category Schemas */
export const MintedPairingCode = Schema.Struct({
  ...PairingCode.fields,
  /** Shown once: only a digest is stored. */
  code: Schema.String
}).annotations({ identifier: "MintedPairingCode" })

/** @since 0.1.0 @category Schemas */
export const PairedIdentity = Schema.Struct({
  id: Schema.String,
  channel: Schema.String,
  account: Schema.String,
  senderId: Schema.String,
  principal: Schema.String,
  createdAt: Schema.Number,
  createdBy: Schema.String,
  expiresAt: Schema.NullOr(Schema.Number),
  revokedAt: Schema.NullOr(Schema.Number),
  active: Schema.Boolean
}).annotations({ identifier: "PairedIdentity" })
/** @since 0.1.0 @category Schemas */
export type PairedIdentity = typeof PairedIdentity.Type

/** @since 0.1.0 @category Groups */
export class PairingGroup extends HttpApiGroup.make("pairing")
  .add(
    HttpApiEndpoint.post("mint", "/v1/pairing/codes")
      .setPayload(MintPayload)
      .addSuccess(MintedPairingCode, { status: 201 })
      .annotate(OpenApi.Summary, "Mint a pairing code (operators); the code is in this answer only")
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/pairing/codes")
      .setUrlParams(Schema.Struct({ channel: Schema.optional(ChannelName) }))
      .addSuccess(Schema.Array(PairingCode))
      .annotate(OpenApi.Summary, "Pairing codes by id and status (operators)")
  )
  .add(
    HttpApiEndpoint.del("revoke", "/v1/pairing/codes/:code")
      .setPath(Schema.Struct({ code: Schema.String.pipe(Schema.maxLength(64)) }))
      .addSuccess(PairingCode)
      .annotate(OpenApi.Summary, "Revoke an unused pairing code, by the code or its id (operators)")
  )
  .add(
    HttpApiEndpoint.get("identities", "/v1/pairing/identities")
      .setUrlParams(Schema.Struct({ channel: Schema.optional(ChannelName), principal: Schema.optional(Principal) }))
      .addSuccess(Schema.Array(PairedIdentity))
      .annotate(OpenApi.Summary, "Paired platform identities (operators)")
  )
  .add(
    HttpApiEndpoint.del("unpair", "/v1/pairing/identities/:id")
      .setPath(Schema.Struct({ id: Schema.String.pipe(Schema.maxLength(1400)) }))
      .addSuccess(PairedIdentity)
      .annotate(OpenApi.Summary, "Unpair an identity: its next message is a stranger's (operators)")
  ) {}

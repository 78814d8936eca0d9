/**
 * `palyra.v1.PairingService`: each call is one call of core's `Pairing` port (`@palyra/channels`
 * provides it when channels are configured), which checks that the caller is an operator; without
 * it every call goes to `Pairing.unconfigured` (FAILED_PRECONDITION for operators).
 */
import { create } from "@bufbuild/protobuf"
import type { ConnectRouter, HandlerContext } from "@connectrpc/connect"
import { type Caller, type Gateway, Pairing } from "@palyra/core"
import { Effect } from "effect"
import * as pb from "../gen/palyra/v1/gateway_pb.js"

type Run = <A>(
  ctx: HandlerContext,
  f: (gateway: Gateway.Service, caller: Caller.Caller) => Effect.Effect<A, unknown, Gateway.Gateway>
) => Promise<A>

const toPbCode = (c: Pairing.CodeInfo) =>
  create(pb.PairingCodeSchema, {
    id: c.id,
    channel: c.channel,
    principal: c.principal,
    createdBy: c.createdBy,
    createdAt: BigInt(c.createdAt),
    expiresAt: BigInt(c.expiresAt),
    bindingTtlSeconds: BigInt(c.bindingTtlSeconds ?? 0),
    status: c.status
  })

const toPbIdentity = (i: Pairing.Identity) =>
  create(pb.PairedIdentitySchema, {
    id: i.id,
    channel: i.channel,
    account: i.account,
    senderId: i.senderId,
    principal: i.principal,
    createdAt: BigInt(i.createdAt),
    createdBy: i.createdBy,
    expiresAt: BigInt(i.expiresAt ?? 0),
    revokedAt: BigInt(i.revokedAt ?? 0),
    active: i.active
  })

/** Register `PairingService` on the router. @internal */
export const pairingRoutes = (router: ConnectRouter, run: Run) => {
  const withPairing = <A>(
    ctx: HandlerContext,
    f: (p: Pairing.Service, caller: Caller.Caller) => Effect.Effect<A, unknown>
  ) => run(ctx, (_g, caller) => Effect.flatMap(Pairing.current, (p) => f(p, caller)))
  router.service(pb.PairingService, {
    mintPairingCode: (req, ctx) =>
      withPairing(ctx, (p, caller) =>
        Effect.map(
          p.mint(caller, {
            channel: req.channel,
            principal: req.principal,
            ttlSeconds: req.ttlSeconds === 0 ? undefined : req.ttlSeconds,
            bindingTtlSeconds: req.bindingTtlSeconds === 0 ? undefined : req.bindingTtlSeconds
          }),
          (m) => create(pb.MintPairingCodeResponseSchema, { code: m.code, info: toPbCode(m) })
        )
      ),
    listPairingCodes: (req, ctx) =>
      withPairing(ctx, (p, caller) =>
        Effect.map(p.list(caller, { channel: req.channel || undefined }), (codes) =>
          create(pb.ListPairingCodesResponseSchema, { codes: codes.map(toPbCode) })
        )
      ),
    revokePairingCode: (req, ctx) =>
      withPairing(ctx, (p, caller) =>
        Effect.map(p.revoke(caller, req.codeOrId), (c) =>
          create(pb.RevokePairingCodeResponseSchema, { code: toPbCode(c) })
        )
      ),
    listPairedIdentities: (req, ctx) =>
      withPairing(ctx, (p, caller) =>
        Effect.map(
          p.listIdentities(caller, { channel: req.channel || undefined, principal: req.principal || undefined }),
          (identities) => create(pb.ListPairedIdentitiesResponseSchema, { identities: identities.map(toPbIdentity) })
        )
      ),
    unpair: (req, ctx) =>
      withPairing(ctx, (p, caller) =>
        Effect.map(p.unpair(caller, req.identityId), (i) =>
          create(pb.UnpairResponseSchema, { identity: toPbIdentity(i) })
        )
      )
  })
}

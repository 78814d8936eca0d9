/**
 * The `pairing` group's handlers: each route is one call of core's `Pairing` port, found in the
 * context (`@palyra/channels` provides it when channels are configured); without it every route
 * answers `Pairing.notConfigured`.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Pairing } from "@palyra/core"
import { Effect, Option } from "effect"
import { Api, CurrentCaller } from "../Api.js"
import { MintPayload } from "../api/PairingGroup.js"
import { readJson } from "./body.js"
import { answer, type HandlerOptions } from "./common.js"

/** @internal */
export const pairing = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "pairing", (handlers) =>
    Effect.gen(function* () {
      const found = yield* Effect.serviceOption(Pairing.Pairing)
      const withService = <A, E>(f: (service: Pairing.Service) => Effect.Effect<A, E>) =>
        Option.match(found, {
          onNone: () => Effect.fail(Pairing.notConfigured()),
          onSome: f
        })
      return handlers
        .handleRaw("mint", () =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(MintPayload, options.limits)
              return yield* withService((s) => s.mint(caller, body))
            })
          )
        )
        .handle("list", ({ urlParams }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => withService((s) => s.list(caller, urlParams))))
        )
        .handle("revoke", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => withService((s) => s.revoke(caller, path.code))))
        )
        .handle("identities", ({ urlParams }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => withService((s) => s.listIdentities(caller, urlParams))))
        )
        .handle("unpair", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => withService((s) => s.unpair(caller, path.id))))
        )
    })
  )

/**
 * The `pairing` group's handlers: each route is one call of core's `Pairing` port, found in the
 * context (`@palyra/channels` provides it when channels are configured), else `Pairing.unconfigured`.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Pairing } from "@palyra/core"
import { Effect } from "effect"
import { Api, CurrentCaller } from "../Api.js"
import { MintPayload } from "../api/PairingGroup.js"
import { readJson } from "./body.js"
import { answer, type HandlerOptions } from "./common.js"

/** @internal */
export const pairing = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "pairing", (handlers) =>
    Effect.gen(function* () {
      const service = yield* Pairing.current
      return handlers
        .handleRaw("mint", () =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(MintPayload, options.limits)
              return yield* service.mint(caller, body)
            })
          )
        )
        .handle("list", ({ urlParams }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => service.list(caller, urlParams)))
        )
        .handle("revoke", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => service.revoke(caller, path.code)))
        )
        .handle("identities", ({ urlParams }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => service.listIdentities(caller, urlParams)))
        )
        .handle("unpair", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => service.unpair(caller, path.id)))
        )
    })
  )

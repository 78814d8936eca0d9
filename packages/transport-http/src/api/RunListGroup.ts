/**
 * `GET /v1/runs`: the caller's runs in the order they started (an operator: everyone's), optionally of one
 * session or in some states — what the console's Runs page lists.
 *
 * The group imports nothing from `Api.ts`; `Api.ts` adds it with the shared error bodies and the
 * `Authentication` middleware.
 *
 * @since 0.1.0
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Ids, Records, RunState } from "@palyra/core"
import { Schema } from "effect"

/** A limit in `[1, 1000]`, written in plain decimal. */
const Limit = Schema.compose(
  Schema.String.pipe(Schema.pattern(/^[1-9][0-9]{0,3}$/, { message: () => "must be a decimal integer" })),
  Schema.NumberFromString
).pipe(
  Schema.between(1, 1000, { message: () => "must be between 1 and 1000" }),
  Schema.annotations({ jsonSchema: { type: "integer", minimum: 1, maximum: 1000 } })
)

/** @since 0.1.0 @category Groups */
export class RunListGroup extends HttpApiGroup.make("runList").add(
  HttpApiEndpoint.get("list", "/v1/runs")
    .setUrlParams(
      Schema.Struct({
        sessionId: Schema.optional(Ids.SessionId),
        state: Schema.optional(RunState.RunState),
        limit: Schema.optional(Limit)
      })
    )
    .addSuccess(Schema.Array(Records.Run.annotations({ identifier: "Run" })))
    .annotate(
      OpenApi.Summary,
      "The caller's runs in the order they started (?sessionId, ?state, ?limit up to 1000, the default)"
    )
) {}

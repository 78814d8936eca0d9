/**
 * `GET /v1/approvals/events`: the caller's approval inbox as server-sent events. First `event:
 * ready` (data `{}`): the stream follows now, so read `GET /v1/approvals?status=pending`. Then `event: requested`
 * when a run starts waiting for an approval the caller may answer, `event: resolved` when one is
 * approved, denied or expires; `data` is the `ApprovalRecord` as JSON. No `id`: a client that
 * reconnects reads `GET /v1/approvals?status=pending` again. While the stream is open the caller
 * counts as an approval channel.
 *
 * The group imports nothing from `Api.ts`; `Api.ts` adds it with the shared error bodies and the
 * `Authentication` middleware.
 *
 * @since 0.1.0
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as OpenApi from "@effect/platform/OpenApi"

/** @since 0.1.0 @category Records */
export const ApprovalEventStream = HttpApiSchema.Text({ contentType: "text/event-stream" }).annotations({
  description:
    "Server-sent events: first `ready` (data `{}`), then `requested` or `resolved` with the ApprovalRecord as JSON `data`; `: keep-alive` comments"
})

/** @since 0.1.0 @category Groups */
export class ApprovalEventsGroup extends HttpApiGroup.make("approvalEvents").add(
  HttpApiEndpoint.get("events", "/v1/approvals/events")
    .addSuccess(ApprovalEventStream)
    .annotate(
      OpenApi.Summary,
      "Follow the caller's approvals live, as SSE: new ones waiting (`requested`) and answered or expired ones (`resolved`)"
    )
) {}

/**
 * The after-run features over HTTP: background tasks, learning candidates, watchdog incidents and
 * memory (`@palyra/core/memory`'s `Background` service). Authorization is core's: tasks and
 * incidents need an operator (403 `permission_denied`); a principal lists and decides only its own
 * candidates and searches and forgets only its own memory (another principal's answers 404
 * `not_found`, like one that does not exist). A feature the daemon runs without answers 404
 * `not_found` ("feature learning not found").
 *
 * The groups are built from the API's error schema and authentication middleware
 * (`BackgroundGroup.make(ApiError, Authentication)` in `Api.ts`), so this file does not import
 * `Api.ts`.
 *
 * @since 0.1.0
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import type * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as OpenApi from "@effect/platform/OpenApi"
import type { Context } from "effect"
import { Schema } from "effect"

/** @since 0.1.0 @category Records */
export const TaskState = Schema.Literal("queued", "running", "succeeded", "failed", "cancelled", "expired")

/** A background task. @since 0.1.0 @category Records */
export const Task = Schema.Struct({
  id: Schema.String,
  kind: Schema.String,
  payload: Schema.Unknown,
  priority: Schema.Number,
  state: TaskState,
  notBefore: Schema.Number,
  expiresAt: Schema.NullOr(Schema.Number),
  attempts: Schema.Number,
  maxAttempts: Schema.Number,
  backoffBaseMs: Schema.Number,
  backoffMaxMs: Schema.Number,
  leaseOwner: Schema.NullOr(Schema.String),
  leaseExpiresAt: Schema.NullOr(Schema.Number),
  heartbeatAt: Schema.NullOr(Schema.Number),
  dedupeKey: Schema.NullOr(Schema.String),
  lastError: Schema.NullOr(Schema.String),
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  finishedAt: Schema.NullOr(Schema.Number)
}).annotations({ identifier: "Task" })

const MemoryKind = Schema.Literal("fact", "preference", "procedure", "note")
/** @since 0.1.0 @category Records */
export const CandidateStatus = Schema.Literal("pending", "accepted", "rejected")

/** Something reflection proposed to remember. @since 0.1.0 @category Records */
export const Candidate = Schema.Struct({
  id: Schema.String,
  principal: Schema.String,
  agent: Schema.NullOr(Schema.String),
  sessionId: Schema.NullOr(Schema.String),
  kind: MemoryKind,
  text: Schema.String,
  confidenceBps: Schema.Number,
  sourceRunId: Schema.NullOr(Schema.String),
  sourceSeq: Schema.NullOr(Schema.Number),
  status: CandidateStatus,
  createdAt: Schema.Number,
  decidedAt: Schema.NullOr(Schema.Number),
  decidedBy: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  itemId: Schema.NullOr(Schema.String)
}).annotations({ identifier: "LearningCandidate" })

/** A memory item. @since 0.1.0 @category Records */
export const MemoryItem = Schema.Struct({
  id: Schema.String,
  principal: Schema.String,
  agent: Schema.NullOr(Schema.String),
  sessionId: Schema.NullOr(Schema.String),
  kind: MemoryKind,
  text: Schema.String,
  sourceRunId: Schema.NullOr(Schema.String),
  sourceSeq: Schema.NullOr(Schema.Number),
  confidenceBps: Schema.NullOr(Schema.Number),
  pinned: Schema.Boolean,
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  expiresAt: Schema.NullOr(Schema.Number)
}).annotations({ identifier: "MemoryItem" })

/** @since 0.1.0 @category Records */
export const Decided = Schema.Struct({ candidate: Candidate, item: Schema.NullOr(MemoryItem) }).annotations({
  identifier: "CandidateDecision"
})

/** A search hit: the item and its blended score. @since 0.1.0 @category Records */
export const MemoryHit = Schema.Struct({
  item: MemoryItem,
  score: Schema.Number,
  relevance: Schema.Number,
  recency: Schema.Number
}).annotations({ identifier: "MemoryHit" })

/** A watchdog incident. @since 0.1.0 @category Records */
export const Incident = Schema.Struct({
  id: Schema.String,
  kind: Schema.Literal(
    "run_stalled",
    "task_lease_expired",
    "approval_pending",
    "journal_stall",
    "tool_process_orphaned"
  ),
  subject: Schema.String,
  sessionId: Schema.NullOr(Schema.String),
  openedAt: Schema.Number,
  detail: Schema.String,
  action: Schema.Literal("none", "cancelled", "requeued", "notified", "killed", "remediation_failed"),
  state: Schema.Literal("open", "resolved"),
  resolvedAt: Schema.NullOr(Schema.Number)
}).annotations({ identifier: "Incident" })

const IdPath = Schema.Struct({ id: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(64)) })
const Limit = Schema.NumberFromString.pipe(
  Schema.int(),
  Schema.between(1, 1_000),
  Schema.annotations({ jsonSchema: { type: "integer", minimum: 1, maximum: 1000 } })
)
const Open = Schema.Literal("true", "false")

/** @since 0.1.0 @category Payloads */
export const RejectPayload = Schema.Struct({ reason: Schema.optional(Schema.String.pipe(Schema.maxLength(500))) })

/**
 * The four groups (`tasks`, `learning`, `incidents`, `memory`) with the API's errors and
 * authentication.
 *
 * @since 0.1.0
 * @category Groups
 */
export const make = <A, I, RX, Id extends HttpApiMiddleware.HttpApiMiddleware.AnyId, S>(
  error: Schema.Schema<A, I, RX>,
  authentication: Context.Tag<Id, S>
) => ({
  tasks: HttpApiGroup.make("tasks")
    .add(
      HttpApiEndpoint.get("list", "/v1/tasks")
        .setUrlParams(
          Schema.Struct({
            state: Schema.optional(TaskState),
            kind: Schema.optional(Schema.String),
            limit: Schema.optional(Limit)
          })
        )
        .addSuccess(Schema.Array(Task))
        .annotate(OpenApi.Summary, "Background tasks, newest first (operators)")
    )
    .add(
      HttpApiEndpoint.post("cancel", "/v1/tasks/:id/cancel")
        .setPath(IdPath)
        .addSuccess(Task)
        .annotate(OpenApi.Summary, "Cancel a background task that has not ended (operators)")
    )
    .addError(error)
    .middleware(authentication),
  learning: HttpApiGroup.make("learning")
    .add(
      HttpApiEndpoint.get("candidates", "/v1/learning/candidates")
        .setUrlParams(
          Schema.Struct({ status: Schema.optional(CandidateStatus), principal: Schema.optional(Schema.String) })
        )
        .addSuccess(Schema.Array(Candidate))
        .annotate(OpenApi.Summary, "Learning candidates (default: pending) of the caller; operators: every principal's")
    )
    .add(
      HttpApiEndpoint.post("accept", "/v1/learning/candidates/:id/accept")
        .setPath(IdPath)
        .addSuccess(Decided)
        .annotate(OpenApi.Summary, "Accept a pending candidate: it is written to memory")
    )
    .add(
      HttpApiEndpoint.post("reject", "/v1/learning/candidates/:id/reject")
        .setPath(IdPath)
        .setPayload(RejectPayload)
        .addSuccess(Decided)
        .annotate(OpenApi.Summary, "Reject a pending candidate")
    )
    .addError(error)
    .middleware(authentication),
  incidents: HttpApiGroup.make("incidents")
    .add(
      HttpApiEndpoint.get("list", "/v1/incidents")
        .setUrlParams(Schema.Struct({ open: Schema.optional(Open), limit: Schema.optional(Limit) }))
        .addSuccess(Schema.Array(Incident))
        .annotate(OpenApi.Summary, "Watchdog incidents, newest first (operators)")
    )
    .addError(error)
    .middleware(authentication),
  memory: HttpApiGroup.make("memory")
    .add(
      HttpApiEndpoint.get("search", "/v1/memory")
        .setUrlParams(Schema.Struct({ q: Schema.String.pipe(Schema.minLength(1)), limit: Schema.optional(Limit) }))
        .addSuccess(Schema.Array(MemoryHit))
        .annotate(OpenApi.Summary, "Search the caller's own memory")
    )
    .add(
      HttpApiEndpoint.del("forget", "/v1/memory/:id")
        .setPath(IdPath)
        .addSuccess(Schema.Struct({ forgotten: Schema.String }))
        .annotate(OpenApi.Summary, "Forget one of the caller's memory items")
    )
    .addError(error)
    .middleware(authentication)
})

/**
 * The HTTP API as one typed contract (`@effect/platform`'s `HttpApi`): every path, parameter,
 * payload, response and error is a Schema here. The server (`HttpTransport`) implements it, the
 * OpenAPI document at `/openapi.json` is derived from it, and a client can be derived from it too:
 *
 * ```ts
 * import { HttpApiClient } from "@effect/platform"
 * import { Api } from "@palyra/transport-http"
 * const client = yield* HttpApiClient.make(Api.Api, { baseUrl: "http://127.0.0.1:7070" })
 * ```
 *
 * Groups: `runs`, `sessions`, `agents`, `approvals`, `grants`, `journal` (bearer token; each answers through
 * one Gateway call), `health` (open), `meta` (`/openapi.json`, `/metrics`) and `openai` (an
 * OpenAI-compatible `POST /v1/chat/completions` with OpenAI-shaped errors); for the web console,
 * `auth` (a token exchanged for a session cookie that then authenticates like the bearer token),
 * `approvalEvents` (the live inbox) and `runList` (in `api/`).
 *
 * Errors are `{ code, message }` with the HTTP status from core's one table (`Errors.wire`).
 *
 * @since 0.1.0
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as OpenApi from "@effect/platform/OpenApi"
import { Agent, type Caller, Errors, Ids, Records, RunState, TapeEvent } from "@palyra/core"
import { Context, Schema } from "effect"
import { ApprovalEventsGroup } from "./api/ApprovalEventsGroup.js"
import { AuthGroup, sessionCookie } from "./api/AuthGroup.js"
import { Attachments, withMultipartForm } from "./api/attachments.js"
import * as BackgroundGroup from "./api/BackgroundGroup.js"
import { PairingGroup } from "./api/PairingGroup.js"
import { RunListGroup } from "./api/RunListGroup.js"

// =============================================================================
// Errors
// =============================================================================

const errorBody = <const C extends Errors.ErrorCode>(code: C, identifier: string, description: string) =>
  Schema.Struct({ code: Schema.Literal(code), message: Schema.String }).annotations(
    HttpApiSchema.annotations({ identifier, description, status: Errors.wire[code].http })
  )

/**
 * One error body per stable error code, each with the HTTP status core's table gives it.
 *
 * @since 0.1.0
 * @category Errors
 */
export const ErrorBodies = {
  invalid_argument: errorBody("invalid_argument", "InvalidArgument", "The request is malformed"),
  unauthenticated: errorBody("unauthenticated", "Unauthenticated", "Missing or invalid bearer token"),
  permission_denied: errorBody("permission_denied", "PermissionDenied", "The caller may not do this"),
  policy_denied: errorBody("policy_denied", "PolicyDenied", "Policy denied the action"),
  not_found: errorBody("not_found", "NotFound", "No such entity (or not the caller's)"),
  conflict: errorBody("conflict", "Conflict", "The entity is not in the required state"),
  invalid_transition: errorBody("invalid_transition", "InvalidTransition", "The run cannot make that transition"),
  payload_too_large: errorBody("payload_too_large", "PayloadTooLarge", "The request body is over the limit"),
  budget_exceeded: errorBody("budget_exceeded", "BudgetExceeded", "A run or session budget is spent"),
  provider_error: errorBody("provider_error", "ProviderError", "The model provider failed"),
  unavailable: errorBody("unavailable", "Unavailable", "The service is not available"),
  tool_error: errorBody("tool_error", "ToolError", "A tool failed (details are not exposed)"),
  journal_error: errorBody("journal_error", "JournalError", "The journal failed (details are not exposed)"),
  internal: errorBody("internal", "Internal", "An internal error (details are not exposed)")
} as const

/**
 * Any error the Gateway routes answer with: `{ code, message }`.
 *
 * @since 0.1.0
 * @category Errors
 */
export const ApiError = Schema.Union(
  ErrorBodies.invalid_argument,
  ErrorBodies.unauthenticated,
  ErrorBodies.permission_denied,
  ErrorBodies.policy_denied,
  ErrorBodies.not_found,
  ErrorBodies.conflict,
  ErrorBodies.invalid_transition,
  ErrorBodies.payload_too_large,
  ErrorBodies.budget_exceeded,
  ErrorBodies.provider_error,
  ErrorBodies.unavailable,
  ErrorBodies.tool_error,
  ErrorBodies.journal_error,
  ErrorBodies.internal
)
/** @since 0.1.0 @category Errors */
export type ApiError = typeof ApiError.Type

/**
 * Any failure as an error body: the code and a message that never carries internal text.
 *
 * @since 0.1.0
 * @category Errors
 */
export const toApiError = (error: unknown): ApiError => {
  const wire = Errors.toWire(error)
  // `wire.code` selects exactly one member of the union.
  return { code: wire.code, message: wire.message } as ApiError
}

// =============================================================================
// Authentication
// =============================================================================

/**
 * The authenticated caller of the current request, provided by `Authentication`.
 *
 * @since 0.1.0
 * @category Security
 */
export class CurrentCaller extends Context.Tag("@palyra/transport-http/CurrentCaller")<
  CurrentCaller,
  Caller.Caller
>() {}

const bearer = HttpApiSecurity.bearer.pipe(
  HttpApiSecurity.annotate(OpenApi.Description, "A token from the daemon's configuration (`Authorization: Bearer …`)")
)

/**
 * Bearer-token (or console session cookie) authentication: provides the `CurrentCaller` or answers
 * 401 `unauthenticated`; a cookie-authenticated change without its CSRF token is 403.
 *
 * @since 0.1.0
 * @category Security
 */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("@palyra/transport-http/Authentication", {
  failure: Schema.Union(ErrorBodies.unauthenticated, ErrorBodies.permission_denied),
  provides: CurrentCaller,
  security: { bearer, cookie: sessionCookie }
}) {}

/**
 * Bearer-token check for `/metrics` (skipped when the server runs with `metricsPublic`).
 *
 * @since 0.1.0
 * @category Security
 */
export class MetricsAuthentication extends HttpApiMiddleware.Tag<MetricsAuthentication>()(
  "@palyra/transport-http/MetricsAuthentication",
  { failure: ErrorBodies.unauthenticated, security: { bearer } }
) {}

// =============================================================================
// Parameters
// =============================================================================

const DECIMAL = /^(0|[1-9][0-9]{0,14})$/

/**
 * A query or header integer in `[min, max]`, written in plain decimal: `0x10`, `1e3`, ` 5`, `+5`
 * and `05` are refused.
 *
 * @since 0.1.0
 * @category Parameters
 */
export const StrictInt = (min: number, max: number) =>
  Schema.compose(
    Schema.String.pipe(Schema.pattern(DECIMAL, { message: () => "must be a decimal integer" })),
    Schema.NumberFromString
  ).pipe(
    Schema.int(),
    Schema.between(min, max, { message: () => `must be between ${min} and ${max}` }),
    Schema.annotations({ jsonSchema: { type: "integer", minimum: min, maximum: max } })
  )

const SeqParam = StrictInt(0, Number.MAX_SAFE_INTEGER)

/** `true` or `false`, nothing else. */
const BooleanParam = Schema.BooleanFromString.annotations({ jsonSchema: { type: "boolean" } })

// =============================================================================
// Records (responses)
// =============================================================================

/** @since 0.1.0 @category Records */
export const Session = Records.Session.annotations({ identifier: "Session" })
/** @since 0.1.0 @category Records */
export const Run = Records.Run.annotations({ identifier: "Run" })
/** @since 0.1.0 @category Records */
export const ApprovalRecord = Records.ApprovalRecord.annotations({ identifier: "ApprovalRecord" })
/** A standing grant with the policy the engine evaluates for it (`null` when it cannot show one). @since 0.1.0 @category Records */
export const Grant = Schema.extend(
  Records.ApprovalRecord,
  Schema.Struct({ policy: Schema.NullOr(Schema.String) })
).annotations({ identifier: "Grant" })
/** An agent sessions can be bound to: what it is for, its tools and models. @since 0.1.0 @category Records */
export const AgentInfo = Agent.AgentInfo
/** @since 0.1.0 @category Records */
export const TapeEventRecord = TapeEvent.TapeEvent.annotations({ identifier: "TapeEvent" })

/** The answer to `POST /v1/runs` (not streamed). @since 0.1.0 @category Records */
export const AcceptedRun = Schema.Struct({
  runId: Ids.RunId,
  sessionId: Ids.SessionId,
  state: RunState.RunState
}).annotations(HttpApiSchema.annotations({ identifier: "AcceptedRun", status: 202 }))

/** The journal's tamper-evidence check. @since 0.1.0 @category Records */
export const VerifyResult = Schema.Union(
  Schema.Struct({ ok: Schema.Literal(true), checked: Schema.Number }),
  Schema.Struct({
    ok: Schema.Literal(false),
    checked: Schema.Number,
    sessionId: Schema.String,
    tapeSeq: Schema.Number,
    reason: Schema.Literal(
      "edited",
      "inserted",
      "deleted",
      "reordered",
      "truncated",
      "row_edited",
      "row_deleted",
      "row_inserted"
    ),
    detail: Schema.String,
    row: Schema.optional(
      Schema.Struct({ table: Schema.String, id: Schema.String, columns: Schema.Array(Schema.String) })
    )
  })
).annotations({ identifier: "VerifyResult" })

/**
 * A server-sent event stream. Each event is `id: <tapeSeq>`, `event: <_tag>`, `data: <TapeEvent
 * JSON>`; comments (`: keep-alive`) keep the connection open.
 *
 * @since 0.1.0
 * @category Records
 */
export const EventStream = HttpApiSchema.Text({ contentType: "text/event-stream" }).annotations({
  description: "Server-sent events: `id` is the tape sequence, `event` the event tag, `data` the TapeEvent as JSON"
})

// =============================================================================
// Payloads
// =============================================================================

const Key = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(512))
const Channel = Schema.String.pipe(Schema.maxLength(128))
const Title = Schema.String.pipe(Schema.maxLength(1000))

/**
 * The agent that answers: a new session is bound to it; an existing session keeps its own, and
 * naming another is 409 `conflict`; an unknown agent is 400 `invalid_argument`.
 */
const AgentField = Schema.optional(
  Agent.AgentId.annotations({ description: "The agent that answers (default: the session's, else `default`)" })
)

/** @since 0.1.0 @category Payloads */
export const MessagePayload = Schema.Struct({
  text: Schema.String.pipe(Schema.minLength(1)),
  sessionId: Schema.optional(Ids.SessionId),
  sessionKey: Schema.optional(Key),
  channel: Schema.optional(Channel),
  agent: AgentField,
  attachments: Attachments
}).annotations({ identifier: "MessageRequest" })

/** @since 0.1.0 @category Payloads */
export const SessionPayload = Schema.Struct({
  sessionKey: Schema.optional(Key),
  title: Schema.optional(Title),
  channel: Schema.optional(Channel),
  agent: AgentField
}).annotations({ identifier: "SessionRequest" })

/** @since 0.1.0 @category Payloads */
export const BranchPayload = Schema.Struct({
  atSeq: Schema.optional(Schema.Int.pipe(Schema.between(0, Number.MAX_SAFE_INTEGER))),
  title: Schema.optional(Title)
}).annotations({ identifier: "BranchRequest" })

/** @since 0.1.0 @category Payloads */
export const RestorePayload = Schema.Struct({
  checkpointId: Schema.String.pipe(Schema.pattern(/^[0-9A-HJKMNP-TV-Z]{26}$/))
}).annotations({ identifier: "RestoreRequest" })

/** A compaction, applied or previewed. @since 0.1.0 @category Records */
export const Compaction = Schema.Struct({
  applied: Schema.Boolean,
  sessionId: Schema.String,
  fromSeq: Schema.Number,
  toSeq: Schema.Number,
  summary: Schema.String,
  strategy: Schema.String,
  summarizer: Schema.Literal("model", "extractive"),
  rejected: Schema.optional(Schema.String),
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number,
  checkpointId: Schema.optional(Schema.String)
}).annotations({ identifier: "Compaction" })

/** A checkpoint: what a compaction covered and how to restore it. @since 0.1.0 @category Records */
export const CheckpointInfo = Schema.Struct({
  id: Schema.String,
  sessionId: Schema.String,
  fromSeq: Schema.Number,
  toSeq: Schema.Number,
  summary: Schema.String,
  createdAt: Schema.Number,
  strategy: Schema.String,
  summarizer: Schema.Literal("model", "extractive"),
  historyFromSeq: Schema.Number,
  resetGeneration: Schema.Number,
  restoredSeq: Schema.Number,
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number,
  pinnedNotes: Schema.Number
}).annotations({ identifier: "Checkpoint" })

/** @since 0.1.0 @category Records */
export const Restored = Schema.Struct({ session: Session, event: TapeEventRecord }).annotations({
  identifier: "Restored"
})

/** @since 0.1.0 @category Payloads */
export const ApprovalPayload = Schema.Struct({
  decision: Schema.Literal("approve", "deny"),
  scope: Schema.optional(Schema.Literal("once", "session", "always")),
  reason: Schema.optional(Schema.String.pipe(Schema.maxLength(1000))),
  /** For session/always grants: stop applying after this many seconds (at most ten years). */
  expiresInSeconds: Schema.optional(Schema.Int.pipe(Schema.between(1, 315_360_000))),
  /** For session/always grants: allow at most this many calls. */
  maxUses: Schema.optional(Schema.Int.pipe(Schema.between(1, 1_000_000_000)))
}).annotations({ identifier: "ApprovalDecision" })

// =============================================================================
// OpenAI-compatible chat completions
// =============================================================================

const openAiError = <const T extends string>(status: number, type: T, identifier: string) =>
  Schema.Struct({
    error: Schema.Struct({
      message: Schema.String,
      type: Schema.Literal(type),
      param: Schema.NullOr(Schema.String),
      code: Schema.NullOr(Schema.String)
    })
  }).annotations(HttpApiSchema.annotations({ identifier, status }))

/**
 * OpenAI-shaped error bodies, one per status (`type` tells them apart; `code` is Palyra's code).
 *
 * @since 0.1.0
 * @category OpenAI
 */
export const OpenAiErrors = {
  400: openAiError(400, "invalid_request_error", "OpenAiInvalidRequest"),
  401: openAiError(401, "authentication_error", "OpenAiAuthentication"),
  403: openAiError(403, "permission_error", "OpenAiPermission"),
  404: openAiError(404, "not_found_error", "OpenAiNotFound"),
  409: openAiError(409, "conflict_error", "OpenAiConflict"),
  413: openAiError(413, "request_too_large", "OpenAiRequestTooLarge"),
  429: openAiError(429, "rate_limit_error", "OpenAiRateLimit"),
  500: openAiError(500, "server_error", "OpenAiServerError"),
  502: openAiError(502, "upstream_error", "OpenAiUpstreamError"),
  503: openAiError(503, "service_unavailable", "OpenAiUnavailable")
} as const

/**
 * Bearer-token authentication for the OpenAI-compatible routes: provides the `CurrentCaller` or
 * answers 401 with an OpenAI-shaped error.
 *
 * @since 0.1.0
 * @category OpenAI
 */
export class OpenAiAuthentication extends HttpApiMiddleware.Tag<OpenAiAuthentication>()(
  "@palyra/transport-http/OpenAiAuthentication",
  { failure: OpenAiErrors[401], provides: CurrentCaller, security: { bearer } }
) {}

const ContentPart = Schema.Struct(
  { type: Schema.String, text: Schema.optional(Schema.String) },
  {
    key: Schema.String,
    value: Schema.Unknown
  }
)

/** One chat message; only text content is read. @since 0.1.0 @category OpenAI */
export const ChatMessage = Schema.Struct(
  {
    role: Schema.Literal("system", "developer", "user", "assistant", "tool", "function"),
    content: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(ContentPart)))),
    name: Schema.optional(Schema.String)
  },
  { key: Schema.String, value: Schema.Unknown }
).annotations({ identifier: "ChatMessage" })

/**
 * A Chat Completions request. `model` names the agent when it is one (see `GET /v1/agents`); any
 * other name selects the session's (or the default) agent. The name is recorded as the session's
 * channel detail. Other OpenAI parameters are accepted and ignored.
 *
 * @since 0.1.0
 * @category OpenAI
 */
export const ChatCompletionRequest = Schema.Struct(
  {
    model: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256)),
    messages: Schema.Array(ChatMessage).pipe(Schema.minItems(1, { message: () => "messages must not be empty" })),
    stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
    stream_options: Schema.optional(
      Schema.NullOr(Schema.Struct({ include_usage: Schema.optional(Schema.NullOr(Schema.Boolean)) }))
    ),
    /** Names the session (like `x-palyra-session`): the same user continues the same session. */
    user: Schema.optional(Key)
  },
  { key: Schema.String, value: Schema.Unknown }
).annotations({ identifier: "ChatCompletionRequest" })

const Usage = Schema.Struct({
  prompt_tokens: Schema.Number,
  completion_tokens: Schema.Number,
  total_tokens: Schema.Number
})

/** A non-streamed Chat Completions answer. @since 0.1.0 @category OpenAI */
export const ChatCompletion = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("chat.completion"),
  created: Schema.Number,
  model: Schema.String,
  choices: Schema.Array(
    Schema.Struct({
      index: Schema.Number,
      message: Schema.Struct({
        role: Schema.Literal("assistant"),
        content: Schema.NullOr(Schema.String),
        refusal: Schema.Null
      }),
      logprobs: Schema.Null,
      finish_reason: Schema.Literal("stop", "length")
    })
  ),
  usage: Usage
}).annotations({ identifier: "ChatCompletion" })

/** One streamed Chat Completions chunk (`data: <chunk>`; the stream ends with `data: [DONE]`). @since 0.1.0 @category OpenAI */
export const ChatCompletionChunk = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("chat.completion.chunk"),
  created: Schema.Number,
  model: Schema.String,
  choices: Schema.Array(
    Schema.Struct({
      index: Schema.Number,
      delta: Schema.Struct({
        role: Schema.optional(Schema.Literal("assistant")),
        content: Schema.optional(Schema.String)
      }),
      logprobs: Schema.Null,
      finish_reason: Schema.NullOr(Schema.Literal("stop", "length"))
    })
  ),
  usage: Schema.optional(Schema.NullOr(Usage))
}).annotations({ identifier: "ChatCompletionChunk" })

/**
 * Headers the chat route reads (plain strings here, so a bad value is answered by the route in
 * OpenAI's error shape).
 *
 * @since 0.1.0
 * @category OpenAI
 */
export const ChatHeaders = Schema.Struct({
  "x-palyra-session": Schema.optional(
    Schema.String.annotations({ description: "The session key (wins over `user`), 1 to 512 characters" })
  ),
  "x-palyra-stateless": Schema.optional(
    Schema.String.annotations({
      description: "`true`: a fresh session for this call, with the earlier messages given as context"
    })
  )
})

// =============================================================================
// Groups
// =============================================================================

const RunPath = Schema.Struct({ id: Ids.RunId })
const SessionPath = Schema.Struct({ id: Ids.SessionId })
const ApprovalPath = Schema.Struct({ id: Ids.ApprovalId })

/** @since 0.1.0 @category Groups */
export class RunsGroup extends HttpApiGroup.make("runs")
  .add(
    HttpApiEndpoint.post("create", "/v1/runs")
      .setUrlParams(Schema.Struct({ stream: Schema.optional(BooleanParam) }))
      .setPayload(MessagePayload)
      .addSuccess(AcceptedRun)
      .addSuccess(EventStream)
      .annotate(OpenApi.Summary, "Send a message: 202 with the run, or (with ?stream=true) the run's events as SSE")
      .annotate(OpenApi.Transform, withMultipartForm)
  )
  .add(HttpApiEndpoint.get("get", "/v1/runs/:id").setPath(RunPath).addSuccess(Run))
  .add(HttpApiEndpoint.post("cancel", "/v1/runs/:id/cancel").setPath(RunPath).addSuccess(Run))
  .addError(ApiError)
  .middleware(Authentication) {}

/** @since 0.1.0 @category Groups */
export class SessionsGroup extends HttpApiGroup.make("sessions")
  .add(
    HttpApiEndpoint.get("list", "/v1/sessions")
      .setUrlParams(
        Schema.Struct({ archived: Schema.optional(BooleanParam), limit: Schema.optional(StrictInt(1, 1000)) })
      )
      .addSuccess(Schema.Array(Session))
  )
  .add(
    HttpApiEndpoint.post("create", "/v1/sessions")
      .setPayload(SessionPayload)
      .addSuccess(Session, { status: 201 })
      .annotate(OpenApi.Summary, "Resolve the caller's session with this key, or create one")
  )
  .add(HttpApiEndpoint.get("get", "/v1/sessions/:id").setPath(SessionPath).addSuccess(Session))
  .add(HttpApiEndpoint.post("reset", "/v1/sessions/:id/reset").setPath(SessionPath).addSuccess(Session))
  .add(
    HttpApiEndpoint.post("branch", "/v1/sessions/:id/branch")
      .setPath(SessionPath)
      .setPayload(BranchPayload)
      .addSuccess(Session, { status: 201 })
  )
  .add(
    HttpApiEndpoint.get("tape", "/v1/sessions/:id/tape")
      .setPath(SessionPath)
      .setUrlParams(Schema.Struct({ after: Schema.optional(SeqParam), limit: Schema.optional(StrictInt(1, 5000)) }))
      .addSuccess(Schema.Array(TapeEventRecord))
  )
  .add(
    HttpApiEndpoint.post("compact", "/v1/sessions/:id/compact")
      .setPath(SessionPath)
      .setUrlParams(Schema.Struct({ preview: Schema.optional(BooleanParam) }))
      .addSuccess(Compaction)
      .annotate(
        OpenApi.Summary,
        "Compact the session's history now (?preview=true: compute the summary, append nothing); needs the context engine"
      )
  )
  .add(
    HttpApiEndpoint.get("checkpoints", "/v1/sessions/:id/checkpoints")
      .setPath(SessionPath)
      .addSuccess(Schema.Array(CheckpointInfo))
  )
  .add(
    HttpApiEndpoint.post("restore", "/v1/sessions/:id/restore")
      .setPath(SessionPath)
      .setPayload(RestorePayload)
      .addSuccess(Restored)
      .annotate(OpenApi.Summary, "Put the session's prompt back as it was before a checkpoint's compaction")
  )
  .add(
    HttpApiEndpoint.get("events", "/v1/sessions/:id/events")
      .setPath(SessionPath)
      .setUrlParams(Schema.Struct({ after: Schema.optional(SeqParam) }))
      .setHeaders(Schema.Struct({ "last-event-id": Schema.optional(SeqParam) }))
      .addSuccess(EventStream)
      .annotate(
        OpenApi.Summary,
        "Replay the session's tape after Last-Event-ID (or ?after), then follow it live, as SSE; the listener counts as an approval channel"
      )
  )
  .addError(ApiError)
  .middleware(Authentication) {}

/** @since 0.1.0 @category Groups */
export class AgentsGroup extends HttpApiGroup.make("agents")
  .add(
    HttpApiEndpoint.get("list", "/v1/agents")
      .addSuccess(Schema.Array(AgentInfo))
      .annotate(OpenApi.Summary, "The agents sessions can be bound to: id, description, tools and models")
  )
  .addError(ApiError)
  .middleware(Authentication) {}

/** @since 0.1.0 @category Groups */
export class ApprovalsGroup extends HttpApiGroup.make("approvals")
  .add(
    HttpApiEndpoint.get("list", "/v1/approvals")
      .setUrlParams(
        Schema.Struct({
          status: Schema.optional(Records.ApprovalStatus),
          sessionId: Schema.optional(Ids.SessionId),
          runId: Schema.optional(Ids.RunId)
        })
      )
      .addSuccess(Schema.Array(ApprovalRecord))
  )
  .add(HttpApiEndpoint.get("get", "/v1/approvals/:id").setPath(ApprovalPath).addSuccess(ApprovalRecord))
  .add(
    HttpApiEndpoint.post("resolve", "/v1/approvals/:id")
      .setPath(ApprovalPath)
      .setPayload(ApprovalPayload)
      .addSuccess(ApprovalRecord)
  )
  .addError(ApiError)
  .middleware(Authentication) {}

/** @since 0.1.0 @category Groups */
export class GrantsGroup extends HttpApiGroup.make("grants")
  .add(HttpApiEndpoint.get("list", "/v1/grants").addSuccess(Schema.Array(Grant)))
  .add(HttpApiEndpoint.post("revoke", "/v1/grants/:id/revoke").setPath(ApprovalPath).addSuccess(Grant))
  .addError(ApiError)
  .middleware(Authentication) {}

/** @since 0.1.0 @category Groups */
export class JournalGroup extends HttpApiGroup.make("journal")
  .add(
    HttpApiEndpoint.get("verify", "/v1/journal/verify")
      .addSuccess(VerifyResult)
      .annotate(OpenApi.Summary, "Recompute the journal's hash chain (operators only)")
  )
  .addError(ApiError)
  .middleware(Authentication) {}

/** @since 0.1.0 @category Groups */
export class HealthGroup extends HttpApiGroup.make("health")
  .add(HttpApiEndpoint.get("healthz", "/healthz").addSuccess(Schema.Struct({ status: Schema.Literal("ok") })))
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ready") }))
      .addError(Schema.Struct({ status: Schema.Literal("starting") }), { status: 503 })
  ) {}

/** @since 0.1.0 @category Groups */
export class MetaGroup extends HttpApiGroup.make("meta")
  .add(
    HttpApiEndpoint.get("openapi", "/openapi.json")
      .addSuccess(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
      .addError(ErrorBodies.internal)
      .middleware(Authentication)
      .annotate(OpenApi.Summary, "This document")
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics")
      .addSuccess(HttpApiSchema.Text({ contentType: "text/plain; version=0.0.4; charset=utf-8" }))
      .addError(ErrorBodies.internal)
      .middleware(MetricsAuthentication)
      .annotate(OpenApi.Summary, "Prometheus metrics (bearer token unless the server runs with metricsPublic)")
  ) {}

/** @since 0.1.0 @category Groups */
export class OpenAiGroup extends HttpApiGroup.make("openai")
  .add(
    HttpApiEndpoint.post("chatCompletions", "/v1/chat/completions")
      .setPayload(ChatCompletionRequest)
      .setHeaders(ChatHeaders)
      .addSuccess(ChatCompletion)
      .addError(OpenAiErrors[400])
      .addError(OpenAiErrors[403])
      .addError(OpenAiErrors[404])
      .addError(OpenAiErrors[409])
      .addError(OpenAiErrors[413])
      .addError(OpenAiErrors[429])
      .addError(OpenAiErrors[500])
      .addError(OpenAiErrors[502])
      .addError(OpenAiErrors[503])
      .annotateContext(
        OpenApi.annotations({
          summary: "OpenAI-compatible Chat Completions (streamed with stream=true)",
          description:
            "The session comes from `x-palyra-session`, else `user`, else a fresh session per call. Only the " +
            "last user message is sent (history comes from the session) unless `x-palyra-stateless: true`, which " +
            "uses a fresh session and passes the earlier messages as context text. Tools run inside Palyra under " +
            "its policy; an approval wait streams a notice and the answer continues once the approval is resolved " +
            "over `POST /v1/approvals/{id}`. `model` selects the agent when it names one (`GET /v1/agents`), " +
            "else the session's or the default agent; it is recorded as the session's channel detail.",
          // The streamed form shares status 200 with the JSON form.
          transform: (operation) => {
            const ok = operation.responses?.["200"]
            if (ok?.content) {
              ok.content["text/event-stream"] = {
                schema: {
                  type: "string",
                  description:
                    "`data: <ChatCompletionChunk JSON>` frames (see components/schemas/ChatCompletionChunk), then `data: [DONE]`"
                }
              }
            }
            return operation
          }
        })
      )
  )
  .middleware(OpenAiAuthentication) {}

interface Media {
  schema?: { $ref?: string; anyOf?: Array<{ $ref?: string }> }
}
interface Spec {
  paths?: Record<
    string,
    Record<string, { responses?: Record<string, { description?: string; content?: Record<string, Media> }> }>
  >
  components?: { schemas?: Record<string, unknown> }
}

/**
 * Effect's JSON Schema marks its built-in schemas (`Schema.Unknown` and friends) with `$id`s such
 * as `/schemas/unknown`; repeated, they make the document invalid (an `$id` must be unique). They
 * carry no constraint, so they go.
 */
const withoutBuiltinIds = (value: unknown): void => {
  const pending: Array<unknown> = [value]
  while (pending.length > 0) {
    const next = pending.pop()
    if (typeof next !== "object" || next === null) continue
    if (!Array.isArray(next) && "$id" in next && typeof next.$id === "string" && next.$id.startsWith("/schemas/")) {
      delete next.$id
    }
    pending.push(...Object.values(next))
  }
}

/**
 * The document as the server behaves: `HttpApi` adds its own decode error (`HttpApiDecodeError`)
 * to every operation, but this server answers decode failures with `InvalidArgument` like every
 * other 400; and no repeated built-in `$id`s.
 */
const asServed = <S extends object>(document: S): S => {
  withoutBuiltinIds(document)
  const spec = document as Spec
  const ref = "#/components/schemas/HttpApiDecodeError"
  for (const item of Object.values(spec.paths ?? {})) {
    for (const operation of Object.values(item)) {
      const responses = operation.responses ?? {}
      const bad = responses["400"]
      const media = bad?.content?.["application/json"]
      if (bad === undefined || media?.schema === undefined) continue
      const members = media.schema.anyOf ?? [media.schema]
      const kept = members.filter((member) => member.$ref !== ref)
      const [only] = kept
      if (only === undefined) delete responses["400"]
      else {
        media.schema = kept.length === 1 ? only : { anyOf: kept }
        bad.description = "The request is malformed"
      }
    }
  }
  const schemas = spec.components?.schemas ?? {}
  delete schemas.HttpApiDecodeError
  for (const name of ["Issue", "PropertyKey"]) {
    if (!JSON.stringify(spec).includes(`"#/components/schemas/${name}"`)) delete schemas[name]
  }
  return document
}

/** Tasks, learning, incidents and memory (see `api/BackgroundGroup.ts`). @since 0.1.0 @category Groups */
export const Background = BackgroundGroup.make(ApiError, Authentication)
/** @since 0.1.0 @category Payloads */
export const RejectPayload = BackgroundGroup.RejectPayload
/** The records of the background groups (`Task`, `Candidate`, `Incident`, `MemoryHit`, …). @since 0.1.0 @category Records */
export * as BackgroundRecords from "./api/BackgroundGroup.js"

/**
 * The whole HTTP API.
 *
 * @since 0.1.0
 * @category Api
 */
export class Api extends HttpApi.make("palyra")
  .add(RunsGroup)
  .add(SessionsGroup)
  .add(AgentsGroup)
  .add(ApprovalsGroup)
  .add(GrantsGroup)
  .add(JournalGroup)
  .add(HealthGroup)
  .add(MetaGroup)
  .add(OpenAiGroup)
  .add(PairingGroup.addError(ApiError).middleware(Authentication))
  .add(AuthGroup.addError(ApiError))
  .add(ApprovalEventsGroup.addError(ApiError).middleware(Authentication))
  .add(RunListGroup.addError(ApiError).middleware(Authentication))
  .add(Background.tasks)
  .add(Background.learning)
  .add(Background.incidents)
  .add(Background.memory)
  .annotateContext(
    OpenApi.annotations({
      title: "Palyra",
      version: "0.1.0",
      description:
        "Run AI agents with policy-gated tools. Errors are `{ code, message }`; ids are ULIDs; event streams are " +
        "server-sent events resumable with `Last-Event-ID`.",
      transform: asServed
    })
  )
  // Streamed chat chunks are not a JSON response body, so name their schema for readers.
  .annotate(HttpApi.AdditionalSchemas, [ChatCompletionChunk]) {}

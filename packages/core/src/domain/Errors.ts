/**
 * Palyra's typed errors. Each carries a stable `code` that transports map to their own status
 * vocabulary (gRPC codes, HTTP statuses) without inspecting messages.
 *
 * @since 0.1.0
 */
import { Predicate, Schema } from "effect"

/** @since 0.1.0 @category Symbols */
export const TypeId: unique symbol = Symbol.for("@palyra/core/PalyraError")
/** @since 0.1.0 @category Symbols */
export type TypeId = typeof TypeId

/** Stable error codes. @since 0.1.0 @category Models */
export type ErrorCode =
  | "invalid_argument"
  | "not_found"
  | "invalid_transition"
  | "conflict"
  | "permission_denied"
  | "unauthenticated"
  | "policy_denied"
  | "budget_exceeded"
  | "payload_too_large"
  | "provider_error"
  | "tool_error"
  | "journal_error"
  | "unavailable"
  | "internal"

/** A request was malformed: bad id, missing field, value out of range. @since 0.1.0 @category Errors */
export class InvalidArgument extends Schema.TaggedError<InvalidArgument>("@palyra/core/InvalidArgument")(
  "InvalidArgument",
  { message: Schema.String, field: Schema.optional(Schema.String) }
) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "invalid_argument"
  }
}

/** The named entity does not exist. @since 0.1.0 @category Errors */
export class NotFound extends Schema.TaggedError<NotFound>("@palyra/core/NotFound")("NotFound", {
  entity: Schema.String,
  id: Schema.String
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "not_found"
  }
  override get message() {
    return `${this.entity} ${this.id} not found`
  }
}

/** A run state transition that the state machine does not allow. @since 0.1.0 @category Errors */
export class InvalidTransition extends Schema.TaggedError<InvalidTransition>("@palyra/core/InvalidTransition")(
  "InvalidTransition",
  { from: Schema.String, transition: Schema.String }
) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "invalid_transition"
  }
  override get message() {
    return `transition ${this.transition} is not allowed from state ${this.from}`
  }
}

/** The operation lost a race or the entity is no longer in the required state. @since 0.1.0 @category Errors */
export class Conflict extends Schema.TaggedError<Conflict>("@palyra/core/Conflict")("Conflict", {
  message: Schema.String
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "conflict"
  }
}

/** The caller may not act on this entity (e.g. another principal's session). @since 0.1.0 @category Errors */
export class PermissionDenied extends Schema.TaggedError<PermissionDenied>("@palyra/core/PermissionDenied")(
  "PermissionDenied",
  { message: Schema.String }
) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "permission_denied"
  }
}

/** The caller could not be authenticated. @since 0.1.0 @category Errors */
export class Unauthenticated extends Schema.TaggedError<Unauthenticated>("@palyra/core/Unauthenticated")(
  "Unauthenticated",
  { message: Schema.String }
) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "unauthenticated"
  }
}

/** Policy denied an action. @since 0.1.0 @category Errors */
export class PolicyDenied extends Schema.TaggedError<PolicyDenied>("@palyra/core/PolicyDenied")("PolicyDenied", {
  tool: Schema.String,
  policyIds: Schema.Array(Schema.String),
  reasons: Schema.Array(Schema.String)
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "policy_denied"
  }
  override get message() {
    return `policy denied ${this.tool}: ${this.reasons.join("; ") || "no permitting policy"}`
  }
}

/** A run or session budget was spent. @since 0.1.0 @category Errors */
export class BudgetExceeded extends Schema.TaggedError<BudgetExceeded>("@palyra/core/BudgetExceeded")(
  "BudgetExceeded",
  { budget: Schema.String, limit: Schema.Number, used: Schema.Number }
) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "budget_exceeded"
  }
  override get message() {
    return `budget ${this.budget} exceeded: used ${this.used} of ${this.limit}`
  }
}

/** A payload is larger than the configured limit. @since 0.1.0 @category Errors */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>("@palyra/core/PayloadTooLarge")(
  "PayloadTooLarge",
  { what: Schema.String, size: Schema.Number, limit: Schema.Number }
) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "payload_too_large"
  }
  override get message() {
    return `${this.what} is ${this.size} bytes, over the limit of ${this.limit}`
  }
}

/** Why a model provider call failed. @since 0.1.0 @category Models */
export const ProviderErrorReason = Schema.Literal(
  "rate_limit",
  "auth",
  "overloaded",
  "bad_request",
  "network",
  "timeout",
  "script_exhausted",
  "unknown"
)
/** @since 0.1.0 @category Models */
export type ProviderErrorReason = typeof ProviderErrorReason.Type

/** A model provider failed. `retryable` tells the retry policy whether to try again. @since 0.1.0 @category Errors */
export class ProviderError extends Schema.TaggedError<ProviderError>("@palyra/core/ProviderError")("ProviderError", {
  provider: Schema.String,
  reason: ProviderErrorReason,
  retryable: Schema.Boolean,
  message: Schema.String,
  status: Schema.optional(Schema.Number),
  cause: Schema.optional(Schema.Defect)
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "provider_error"
  }
}

/** A tool failed; the failure goes back to the model as a tool result. @since 0.1.0 @category Errors */
export class ToolError extends Schema.TaggedError<ToolError>("@palyra/core/ToolError")("ToolError", {
  tool: Schema.String,
  reason: Schema.Literal("invalid_arguments", "timeout", "failed", "unknown_tool", "output_too_large", "refused"),
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "tool_error"
  }
}

/** The journal could not read or write. Stored data is unchanged when this is raised. @since 0.1.0 @category Errors */
export class JournalError extends Schema.TaggedError<JournalError>("@palyra/core/JournalError")("JournalError", {
  method: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "journal_error"
  }
}

/**
 * A live subscriber fell more than its buffer behind the session's tape (a client not reading its
 * socket) and was cut off so it cannot hold up the writer or other subscribers. Resumable: subscribe
 * again after `lastSeq`, the last event it was given; nothing is lost, the tape has every event.
 *
 * @since 0.1.0
 * @category Errors
 */
export class StreamLagged extends Schema.TaggedError<StreamLagged>("@palyra/core/StreamLagged")("StreamLagged", {
  sessionId: Schema.String,
  lastSeq: Schema.Number,
  limit: Schema.Number
}) {
  readonly [TypeId]: TypeId = TypeId
  get code(): ErrorCode {
    return "unavailable"
  }
  override get message() {
    return `the stream fell more than ${this.limit} events behind session ${this.sessionId}; resume after tape seq ${this.lastSeq}`
  }
}

/** @since 0.1.0 @category Models */
export type PalyraError =
  | InvalidArgument
  | NotFound
  | InvalidTransition
  | Conflict
  | PermissionDenied
  | Unauthenticated
  | PolicyDenied
  | BudgetExceeded
  | PayloadTooLarge
  | ProviderError
  | ToolError
  | JournalError
  | StreamLagged

/** True for every error class in this module. @since 0.1.0 @category Guards */
export const isPalyraError = (u: unknown): u is PalyraError => Predicate.hasProperty(u, TypeId)

/**
 * gRPC status codes (the numbers are the same in every gRPC and Connect implementation).
 *
 * @since 0.1.0
 * @category Wire
 */
export type GrpcStatus = 3 | 5 | 7 | 8 | 9 | 13 | 14 | 16

/** How one error code looks on each wire. @since 0.1.0 @category Wire */
export interface WireCode {
  /** HTTP status. */
  readonly http: number
  /** gRPC status code. */
  readonly grpc: GrpcStatus
  /** Whether the error's message may be shown to the client (internal failures never are). */
  readonly expose: boolean
}

/**
 * The one table every transport uses to put a core error on its wire.
 *
 * @since 0.1.0
 * @category Wire
 */
export const wire: Readonly<Record<ErrorCode, WireCode>> = {
  invalid_argument: { http: 400, grpc: 3, expose: true },
  unauthenticated: { http: 401, grpc: 16, expose: true },
  permission_denied: { http: 403, grpc: 7, expose: true },
  policy_denied: { http: 403, grpc: 7, expose: true },
  not_found: { http: 404, grpc: 5, expose: true },
  conflict: { http: 409, grpc: 9, expose: true },
  invalid_transition: { http: 409, grpc: 9, expose: true },
  payload_too_large: { http: 413, grpc: 8, expose: true },
  budget_exceeded: { http: 429, grpc: 8, expose: true },
  provider_error: { http: 502, grpc: 14, expose: true },
  unavailable: { http: 503, grpc: 14, expose: true },
  tool_error: { http: 500, grpc: 13, expose: false },
  journal_error: { http: 500, grpc: 13, expose: false },
  internal: { http: 500, grpc: 13, expose: false }
}

/** A failure as a client may see it. @since 0.1.0 @category Wire */
export interface WireError extends WireCode {
  readonly code: ErrorCode
  readonly message: string
}

/**
 * Any failure (a Palyra error or anything else) as a client may see it: the code, its wire
 * statuses, and a message that never carries internal text.
 *
 * @since 0.1.0
 * @category Wire
 */
export const toWire = (error: unknown): WireError => {
  const code: ErrorCode = isPalyraError(error) ? error.code : "internal"
  const entry = wire[code]
  return { code, ...entry, message: entry.expose && isPalyraError(error) ? error.message : "internal error" }
}

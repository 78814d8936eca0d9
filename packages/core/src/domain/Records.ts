/**
 * Stored records other than tape events: sessions, runs and approvals.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DEFAULT_AGENT } from "./Agent.js"
import { ApprovalId, RunId, SessionId, ToolCallId } from "./Ids.js"
import { RunState } from "./RunState.js"
import { ApprovalScope, Risk } from "./TapeEvent.js"

/**
 * A conversation bound to one principal and answered by one agent (`agentId`). `historyFromSeq`
 * moves forward on reset (older tape stays, but is no longer part of the prompt); a branch starts
 * from its parent's tape up to `parentSeq`.
 *
 * @since 0.1.0
 * @category Records
 */
export const Session = Schema.Struct({
  id: SessionId,
  principal: Schema.String,
  key: Schema.NullOr(Schema.String),
  channel: Schema.NullOr(Schema.String),
  title: Schema.NullOr(Schema.String),
  parentId: Schema.NullOr(SessionId),
  parentSeq: Schema.NullOr(Schema.Number),
  resetGeneration: Schema.Number,
  historyFromSeq: Schema.Number,
  tokensUsed: Schema.Number,
  archived: Schema.Boolean,
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  /** The agent that answers this session; fixed when the session is created. */
  agentId: Schema.optionalWith(Schema.String, { default: () => DEFAULT_AGENT })
})
/** @since 0.1.0 @category Records */
export type Session = typeof Session.Type

/** @since 0.1.0 @category Records */
export const Run = Schema.Struct({
  id: RunId,
  sessionId: SessionId,
  principal: Schema.String,
  state: RunState,
  input: Schema.String,
  startSeq: Schema.Number,
  error: Schema.NullOr(Schema.Struct({ code: Schema.String, message: Schema.String })),
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  /**
   * The `tapeSeq` of the run's last event (its final `RunStateChanged`), recorded by the journal in
   * the commit that made the run terminal; absent while it runs (and for runs a journal ended before
   * it recorded this). A run's events all lie in `[startSeq, endSeq]`.
   */
  endSeq: Schema.optional(Schema.Number)
})
/** @since 0.1.0 @category Records */
export type Run = typeof Run.Type

/** @since 0.1.0 @category Records */
export const ApprovalStatus = Schema.Literal("pending", "approved", "denied", "expired", "revoked")
/** @since 0.1.0 @category Records */
export type ApprovalStatus = typeof ApprovalStatus.Type

/**
 * A request for a human decision, bound to exactly one tool call (run, tool call id, args digest).
 *
 * @since 0.1.0
 * @category Records
 */
export const ApprovalRecord = Schema.Struct({
  id: ApprovalId,
  sessionId: SessionId,
  runId: RunId,
  toolCallId: ToolCallId,
  principal: Schema.String,
  tool: Schema.String,
  argsDigest: Schema.String,
  risk: Risk,
  summary: Schema.String,
  status: ApprovalStatus,
  scope: ApprovalScope,
  requestedAt: Schema.Number,
  expiresAt: Schema.Number,
  resolvedAt: Schema.NullOr(Schema.Number),
  resolver: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  /** For `session`/`always` grants: when the grant stops applying (epoch ms), if ever. */
  grantExpiresAt: Schema.optionalWith(Schema.NullOr(Schema.Number), { default: () => null }),
  /** How many calls the grant has allowed so far. */
  grantUses: Schema.optionalWith(Schema.Number, { default: () => 0 }),
  /** How many calls the grant may allow, if limited. */
  grantMaxUses: Schema.optionalWith(Schema.NullOr(Schema.Number), { default: () => null })
})
/** @since 0.1.0 @category Records */
export type ApprovalRecord = typeof ApprovalRecord.Type

/** True when an approval is a standing grant that still applies at `now`. @since 0.1.0 @category Records */
export const isActiveGrant = (a: ApprovalRecord, now: number): boolean =>
  a.status === "approved" &&
  a.scope !== "once" &&
  (a.grantExpiresAt === null || now < a.grantExpiresAt) &&
  (a.grantMaxUses === null || a.grantUses < a.grantMaxUses)

/** Filter for listing approvals. @since 0.1.0 @category Records */
export interface ApprovalFilter {
  readonly sessionId?: SessionId | undefined
  readonly runId?: RunId | undefined
  readonly status?: ApprovalStatus | undefined
  readonly limit?: number | undefined
}

/** Filter for listing runs. @since 0.1.0 @category Records */
export interface RunFilter {
  readonly sessionId?: SessionId | undefined
  /** Only this principal's runs (applied before `limit`). */
  readonly principal?: string | undefined
  readonly states?: ReadonlyArray<RunState> | undefined
  readonly limit?: number | undefined
}

/** Filter for listing sessions. @since 0.1.0 @category Records */
export interface SessionFilter {
  readonly principal?: string | undefined
  readonly includeArchived?: boolean | undefined
  readonly limit?: number | undefined
}

/**
 * A new session record: every field not given takes its starting value.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeSession = (
  fields: Pick<Session, "id" | "principal"> & Partial<Omit<Session, "id" | "principal">>
): Session => ({
  key: null,
  channel: null,
  title: null,
  parentId: null,
  parentSeq: null,
  resetGeneration: 0,
  historyFromSeq: 0,
  tokensUsed: 0,
  archived: false,
  agentId: DEFAULT_AGENT,
  createdAt: fields.createdAt ?? 1,
  updatedAt: fields.updatedAt ?? fields.createdAt ?? 1,
  ...fields
})

/**
 * A new, pending approval for one tool call: not resolved, scope `once`, no grant limits.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeApproval = (
  fields: Pick<
    ApprovalRecord,
    | "id"
    | "sessionId"
    | "runId"
    | "toolCallId"
    | "principal"
    | "tool"
    | "argsDigest"
    | "risk"
    | "summary"
    | "requestedAt"
    | "expiresAt"
  >
): ApprovalRecord => ({
  ...fields,
  status: "pending",
  scope: "once",
  resolvedAt: null,
  resolver: null,
  reason: null,
  grantExpiresAt: null,
  grantUses: 0,
  grantMaxUses: null
})

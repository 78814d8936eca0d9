/**
 * The tape: every event of a session, in order. Each event carries the session, the run (or `null`
 * for session-level events), its `tapeSeq` (per session, strictly increasing, gap-free) and `at`
 * (epoch milliseconds). Journals persist these; transports stream them.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { ApprovalId, RunId, SessionId, ToolCallId } from "./Ids.js"
import { RunState } from "./RunState.js"

const envelope = {
  sessionId: SessionId,
  runId: Schema.NullOr(RunId),
  tapeSeq: Schema.Number,
  at: Schema.Number
}

/** Tool risk levels. They drive default policies and what an approval prompt shows. @since 0.1.0 @category Models */
export const Risk = Schema.Literal("low", "sensitive", "critical")
/** @since 0.1.0 @category Models */
export type Risk = typeof Risk.Type

/** @since 0.1.0 @category Models */
export const ApprovalScope = Schema.Literal("once", "session", "always")
/** @since 0.1.0 @category Models */
export type ApprovalScope = typeof ApprovalScope.Type

/** @since 0.1.0 @category Models */
export const PolicyDecision = Schema.Literal("allow", "deny", "require_approval")
/** @since 0.1.0 @category Models */
export type PolicyDecision = typeof PolicyDecision.Type

/**
 * A file that came with a user message, by reference: the bytes are in the blob store under their
 * SHA-256 `digest` (hex), never on the tape. `mediaType` is what the bytes are (sniffed, not the
 * declared type).
 *
 * @since 0.1.0
 * @category Models
 */
export const Attachment = Schema.Struct({
  digest: Schema.String,
  mediaType: Schema.String,
  size: Schema.Number,
  name: Schema.String
})
/** @since 0.1.0 @category Models */
export type Attachment = typeof Attachment.Type

/** A run was admitted (and queued behind `queuedBehind` when the session was busy). @since 0.1.0 @category Events */
export const RunAccepted = Schema.TaggedStruct("RunAccepted", {
  ...envelope,
  principal: Schema.String,
  queuedBehind: Schema.NullOr(RunId),
  /** The message's attachments (absent when there are none), copied onto its `UserMessage`. */
  attachments: Schema.optional(Schema.Array(Attachment))
})
/** @since 0.1.0 @category Events */
export const UserMessage = Schema.TaggedStruct("UserMessage", {
  ...envelope,
  text: Schema.String,
  /** Absent when there are none. */
  attachments: Schema.optional(Schema.Array(Attachment))
})
/**
 * Why a model call went to the model it did: the session's agent, the rule that picked the list of
 * candidates (`primary`: the agent's models; `usage`: the session had used at least
 * `thresholdTokens` of its `budgetTokens`, so the agent's routed — e.g. cheaper — models answer), the
 * candidates in fail-over order, and which of them this call is (`attempt` > 0: the earlier ones
 * failed before answering).
 *
 * @since 0.1.0
 * @category Models
 */
export const UsageRoutingPlan = Schema.Struct({
  agent: Schema.String,
  rule: Schema.Literal("primary", "usage"),
  /** A readable account of the choice, e.g. `session used 8200 of 10000 tokens (threshold 8000)`. */
  reason: Schema.String,
  /** Tokens the session had used before this call. */
  usedTokens: Schema.Number,
  /** The session's token budget (`maxTokensPerSession`) the threshold is a share of. */
  budgetTokens: Schema.Number,
  /** The threshold in tokens; `null` when the agent has no usage rule. */
  thresholdTokens: Schema.NullOr(Schema.Number),
  /** Model names in fail-over order. */
  candidates: Schema.Array(Schema.String),
  /** Index into `candidates` of the model this call uses. */
  attempt: Schema.Number
})
/** @since 0.1.0 @category Models */
export type UsageRoutingPlan = typeof UsageRoutingPlan.Type

/** A model call is about to be made (and, with `routing`, why this model). @since 0.1.0 @category Events */
export const ModelRequest = Schema.TaggedStruct("ModelRequest", {
  ...envelope,
  turn: Schema.Number,
  model: Schema.String,
  messages: Schema.Number,
  estimatedTokens: Schema.Number,
  tools: Schema.Array(Schema.String),
  routing: Schema.optional(UsageRoutingPlan)
})
/** Coalesced streamed text (several tokens per event). @since 0.1.0 @category Events */
export const AssistantDelta = Schema.TaggedStruct("AssistantDelta", {
  ...envelope,
  turn: Schema.Number,
  text: Schema.String
})
/** The full text of one model turn. @since 0.1.0 @category Events */
export const AssistantMessage = Schema.TaggedStruct("AssistantMessage", {
  ...envelope,
  turn: Schema.Number,
  text: Schema.String,
  finishReason: Schema.String
})
/** The model asked for a tool call (the intent). @since 0.1.0 @category Events */
export const ToolProposed = Schema.TaggedStruct("ToolProposed", {
  ...envelope,
  toolCallId: ToolCallId,
  providerCallId: Schema.String,
  tool: Schema.String,
  args: Schema.Unknown,
  argsDigest: Schema.String
})
/** The policy engine's decision for a tool call, with the policies that made it. @since 0.1.0 @category Events */
export const PolicyDecided = Schema.TaggedStruct("PolicyDecided", {
  ...envelope,
  toolCallId: ToolCallId,
  tool: Schema.String,
  decision: PolicyDecision,
  policyIds: Schema.Array(Schema.String),
  reasons: Schema.Array(Schema.String)
})
/** @since 0.1.0 @category Events */
export const ApprovalRequested = Schema.TaggedStruct("ApprovalRequested", {
  ...envelope,
  approvalId: ApprovalId,
  toolCallId: ToolCallId,
  tool: Schema.String,
  risk: Risk,
  argsDigest: Schema.String,
  summary: Schema.String,
  expiresAt: Schema.Number
})
/** @since 0.1.0 @category Events */
export const ApprovalResolved = Schema.TaggedStruct("ApprovalResolved", {
  ...envelope,
  approvalId: ApprovalId,
  toolCallId: ToolCallId,
  decision: Schema.Literal("approved", "denied", "expired"),
  scope: ApprovalScope,
  by: Schema.String,
  reason: Schema.String
})
/** @since 0.1.0 @category Events */
export const ToolStarted = Schema.TaggedStruct("ToolStarted", {
  ...envelope,
  toolCallId: ToolCallId,
  tool: Schema.String,
  attempt: Schema.Number
})
/** The outcome of a tool call as the model will see it. @since 0.1.0 @category Events */
export const ToolResult = Schema.TaggedStruct("ToolResult", {
  ...envelope,
  toolCallId: ToolCallId,
  tool: Schema.String,
  status: Schema.Literal("ok", "error", "denied", "interrupted", "cancelled"),
  output: Schema.String,
  truncated: Schema.Boolean,
  durationMs: Schema.Number
})
/** @since 0.1.0 @category Events */
export const RunStateChanged = Schema.TaggedStruct("RunStateChanged", {
  ...envelope,
  from: RunState,
  to: RunState,
  reason: Schema.String
})
/**
 * Older tape was summarised: from this event on, the prompt shows `summary` in place of everything up
 * to `toSeq` (`fromSeq..toSeq` is the range this compaction newly covers; the summary is cumulative).
 * `checkpointId` names the checkpoint that restores the prompt as it was just before.
 *
 * @since 0.1.0
 * @category Events
 */
export const CompactionApplied = Schema.TaggedStruct("CompactionApplied", {
  ...envelope,
  summary: Schema.String,
  fromSeq: Schema.Number,
  toSeq: Schema.Number,
  checkpointId: Schema.String,
  /** The compaction strategy, e.g. `session_window_v1`. */
  strategy: Schema.String,
  /** Who wrote the summary: the session's model (verified) or the deterministic extractive fallback. */
  summarizer: Schema.Literal("model", "extractive"),
  /** Prompt tokens just before and just after the compaction. */
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number
})
/**
 * The session's prompt went back to a checkpoint (time travel): from this event on, the prompt is the
 * one the session had at `restoredSeq` (just before that checkpoint's compaction), followed by what
 * comes after this event. Nothing on the tape is deleted or rewritten.
 *
 * @since 0.1.0
 * @category Events
 */
export const CheckpointRestored = Schema.TaggedStruct("CheckpointRestored", {
  ...envelope,
  checkpointId: Schema.String,
  restoredSeq: Schema.Number,
  historyFromSeq: Schema.Number,
  by: Schema.String
})
/** Tokens used by one model call (`turn` 0: a compaction's summary call). @since 0.1.0 @category Events */
export const Usage = Schema.TaggedStruct("Usage", {
  ...envelope,
  turn: Schema.Number,
  inputTokens: Schema.Number,
  outputTokens: Schema.Number
})
/** A run failed; `code` is a stable error code. @since 0.1.0 @category Events */
export const RunError = Schema.TaggedStruct("RunError", { ...envelope, code: Schema.String, message: Schema.String })
/** A standing grant was created, used, revoked or used up. @since 0.1.0 @category Events */
export const GrantChanged = Schema.TaggedStruct("GrantChanged", {
  ...envelope,
  approvalId: ApprovalId,
  tool: Schema.String,
  change: Schema.Literal("granted", "used", "revoked", "exhausted"),
  by: Schema.String,
  uses: Schema.Number,
  maxUses: Schema.NullOr(Schema.Number),
  expiresAt: Schema.NullOr(Schema.Number)
})
/** A note written by the agent (the `session.note` tool) or an operator. @since 0.1.0 @category Events */
export const SessionNote = Schema.TaggedStruct("SessionNote", {
  ...envelope,
  author: Schema.String,
  text: Schema.String
})

/** @since 0.1.0 @category Events */
export const TapeEvent = Schema.Union(
  RunAccepted,
  UserMessage,
  ModelRequest,
  AssistantDelta,
  AssistantMessage,
  ToolProposed,
  PolicyDecided,
  ApprovalRequested,
  ApprovalResolved,
  ToolStarted,
  ToolResult,
  RunStateChanged,
  CompactionApplied,
  CheckpointRestored,
  Usage,
  RunError,
  SessionNote,
  GrantChanged
)
/** @since 0.1.0 @category Events */
export type TapeEvent = typeof TapeEvent.Type
/** @since 0.1.0 @category Events */
export type TapeEventEncoded = typeof TapeEvent.Encoded
/** @since 0.1.0 @category Events */
export type TapeEventTag = TapeEvent["_tag"]
/** Narrow an event union by tag. @since 0.1.0 @category Events */
export type TapeEventOf<T extends TapeEventTag> = Extract<TapeEvent, { readonly _tag: T }>

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never
/** An event before the journal assigns its `tapeSeq`. @since 0.1.0 @category Events */
export type NewTapeEvent = DistributiveOmit<TapeEvent, "tapeSeq">

/** True when this event ends its run (a transition into a terminal state). @since 0.1.0 @category Predicates */
export const isRunEnd = (event: TapeEvent): boolean =>
  event._tag === "RunStateChanged" && (event.to === "Done" || event.to === "Cancelled" || event.to === "Failed")

import { create, fromJson, type JsonValue } from "@bufbuild/protobuf"
import { timestampFromMs, ValueSchema } from "@bufbuild/protobuf/wkt"
import type { Agent, Records, TapeEvent } from "@palyra/core"
import * as pb from "../gen/palyra/v1/gateway_pb.js"

const runStates: Record<Records.Run["state"], pb.RunState> = {
  Pending: pb.RunState.PENDING,
  Accepted: pb.RunState.ACCEPTED,
  InProgress: pb.RunState.IN_PROGRESS,
  WaitingForApproval: pb.RunState.WAITING_FOR_APPROVAL,
  Done: pb.RunState.DONE,
  Cancelled: pb.RunState.CANCELLED,
  Failed: pb.RunState.FAILED
}
const risks: Record<TapeEvent.Risk, pb.Risk> = {
  low: pb.Risk.LOW,
  sensitive: pb.Risk.SENSITIVE,
  critical: pb.Risk.CRITICAL
}
const scopes: Record<TapeEvent.ApprovalScope, pb.ApprovalScope> = {
  once: pb.ApprovalScope.ONCE,
  session: pb.ApprovalScope.SESSION,
  always: pb.ApprovalScope.ALWAYS
}
const decisions: Record<TapeEvent.PolicyDecision, pb.PolicyDecision> = {
  allow: pb.PolicyDecision.ALLOW,
  deny: pb.PolicyDecision.DENY,
  require_approval: pb.PolicyDecision.REQUIRE_APPROVAL
}
const statuses: Record<Records.ApprovalStatus, pb.ApprovalStatus> = {
  pending: pb.ApprovalStatus.PENDING,
  approved: pb.ApprovalStatus.APPROVED,
  denied: pb.ApprovalStatus.DENIED,
  expired: pb.ApprovalStatus.EXPIRED,
  revoked: pb.ApprovalStatus.REVOKED
}

/** @internal */
export const scopeFromPb = (scope: pb.ApprovalScope): TapeEvent.ApprovalScope | undefined =>
  scope === pb.ApprovalScope.SESSION
    ? "session"
    : scope === pb.ApprovalScope.ALWAYS
      ? "always"
      : scope === pb.ApprovalScope.ONCE
        ? "once"
        : undefined

/** @internal */
export const statusFromPb = (status: pb.ApprovalStatus): Records.ApprovalStatus | undefined =>
  (Object.entries(statuses).find(([, v]) => v === status)?.[0] as Records.ApprovalStatus | undefined) ?? undefined

const ts = (ms: number | null | undefined) => (ms === null || ms === undefined ? undefined : timestampFromMs(ms))
const jsonValue = (value: unknown) => fromJson(ValueSchema, (value ?? null) as JsonValue)

const toPbRouting = (r: TapeEvent.UsageRoutingPlan): pb.UsageRoutingPlan =>
  create(pb.UsageRoutingPlanSchema, {
    agent: r.agent,
    rule: r.rule,
    reason: r.reason,
    usedTokens: BigInt(r.usedTokens),
    budgetTokens: BigInt(r.budgetTokens),
    ...(r.thresholdTokens === null ? {} : { thresholdTokens: BigInt(r.thresholdTokens) }),
    candidates: [...r.candidates],
    attempt: r.attempt
  })

const toPbAttachments = (list: ReadonlyArray<TapeEvent.Attachment> | undefined) =>
  (list ?? []).map((a) =>
    create(pb.AttachmentSchema, { digest: a.digest, mediaType: a.mediaType, size: BigInt(a.size), name: a.name })
  )

/** Wire attachments as the Gateway takes them (empty strings mean "not given"). @internal */
export const attachmentsFromPb = (list: ReadonlyArray<pb.AttachmentInput>) =>
  list.length === 0
    ? {}
    : {
        attachments: list.map((a) => ({
          data: a.data,
          name: a.name || undefined,
          mediaType: a.mediaType || undefined
        }))
      }

/** Domain event → wire event. @internal */
export const toPbEvent = (e: TapeEvent.TapeEvent): pb.TapeEvent => {
  const base = { sessionId: e.sessionId, runId: e.runId ?? "", tapeSeq: BigInt(e.tapeSeq), at: timestampFromMs(e.at) }
  const kind = ((): pb.TapeEvent["kind"] => {
    switch (e._tag) {
      case "RunAccepted":
        return {
          case: "runAccepted",
          value: create(pb.RunAcceptedSchema, {
            principal: e.principal,
            queuedBehind: e.queuedBehind ?? "",
            attachments: toPbAttachments(e.attachments)
          })
        }
      case "UserMessage":
        return {
          case: "userMessage",
          value: create(pb.UserMessageSchema, { text: e.text, attachments: toPbAttachments(e.attachments) })
        }
      case "ModelRequest":
        return {
          case: "modelRequest",
          value: create(pb.ModelRequestSchema, {
            turn: e.turn,
            model: e.model,
            messages: e.messages,
            estimatedTokens: e.estimatedTokens,
            tools: [...e.tools],
            ...(e.routing === undefined ? {} : { routing: toPbRouting(e.routing) })
          })
        }
      case "AssistantDelta":
        return { case: "assistantDelta", value: create(pb.AssistantDeltaSchema, { turn: e.turn, text: e.text }) }
      case "AssistantMessage":
        return {
          case: "assistantMessage",
          value: create(pb.AssistantMessageSchema, { turn: e.turn, text: e.text, finishReason: e.finishReason })
        }
      case "ToolProposed":
        return {
          case: "toolProposed",
          value: create(pb.ToolProposedSchema, {
            toolCallId: e.toolCallId,
            providerCallId: e.providerCallId,
            tool: e.tool,
            args: jsonValue(e.args),
            argsDigest: e.argsDigest
          })
        }
      case "PolicyDecided":
        return {
          case: "policyDecided",
          value: create(pb.PolicyDecidedSchema, {
            toolCallId: e.toolCallId,
            tool: e.tool,
            decision: decisions[e.decision],
            policyIds: [...e.policyIds],
            reasons: [...e.reasons]
          })
        }
      case "ApprovalRequested":
        return {
          case: "approvalRequested",
          value: create(pb.ApprovalRequestedSchema, {
            approvalId: e.approvalId,
            toolCallId: e.toolCallId,
            tool: e.tool,
            risk: risks[e.risk],
            argsDigest: e.argsDigest,
            summary: e.summary,
            expiresAt: timestampFromMs(e.expiresAt)
          })
        }
      case "ApprovalResolved":
        return {
          case: "approvalResolved",
          value: create(pb.ApprovalResolvedSchema, {
            approvalId: e.approvalId,
            toolCallId: e.toolCallId,
            decision: e.decision,
            scope: scopes[e.scope],
            by: e.by,
            reason: e.reason
          })
        }
      case "ToolStarted":
        return {
          case: "toolStarted",
          value: create(pb.ToolStartedSchema, { toolCallId: e.toolCallId, tool: e.tool, attempt: e.attempt })
        }
      case "ToolResult":
        return {
          case: "toolResult",
          value: create(pb.ToolResultSchema, {
            toolCallId: e.toolCallId,
            tool: e.tool,
            status: e.status,
            output: e.output,
            truncated: e.truncated,
            durationMs: Math.max(0, Math.round(e.durationMs))
          })
        }
      case "RunStateChanged":
        return {
          case: "runStateChanged",
          value: create(pb.RunStateChangedSchema, { from: runStates[e.from], to: runStates[e.to], reason: e.reason })
        }
      case "CompactionApplied":
        return {
          case: "compactionApplied",
          value: create(pb.CompactionAppliedSchema, {
            summary: e.summary,
            fromSeq: BigInt(e.fromSeq),
            toSeq: BigInt(e.toSeq),
            checkpointId: e.checkpointId,
            strategy: e.strategy,
            summarizer: e.summarizer,
            tokensBefore: BigInt(e.tokensBefore),
            tokensAfter: BigInt(e.tokensAfter)
          })
        }
      case "CheckpointRestored":
        return {
          case: "checkpointRestored",
          value: create(pb.CheckpointRestoredSchema, {
            checkpointId: e.checkpointId,
            restoredSeq: BigInt(e.restoredSeq),
            historyFromSeq: BigInt(e.historyFromSeq),
            by: e.by
          })
        }
      case "Usage":
        return {
          case: "usage",
          value: create(pb.UsageSchema, { turn: e.turn, inputTokens: e.inputTokens, outputTokens: e.outputTokens })
        }
      case "RunError":
        return { case: "runError", value: create(pb.RunErrorSchema, { code: e.code, message: e.message }) }
      case "SessionNote":
        return { case: "sessionNote", value: create(pb.SessionNoteSchema, { author: e.author, text: e.text }) }
      case "GrantChanged":
        return {
          case: "grantChanged",
          value: create(pb.GrantChangedSchema, {
            approvalId: e.approvalId,
            tool: e.tool,
            change: e.change,
            by: e.by,
            uses: e.uses,
            maxUses: e.maxUses ?? 0,
            ...(e.expiresAt === null ? {} : { expiresAt: timestampFromMs(e.expiresAt) })
          })
        }
    }
  })()
  return create(pb.TapeEventSchema, { ...base, kind })
}

/** @internal */
export const toPbRun = (r: Records.Run): pb.Run =>
  create(pb.RunSchema, {
    id: r.id,
    sessionId: r.sessionId,
    principal: r.principal,
    state: runStates[r.state],
    input: r.input,
    startSeq: BigInt(r.startSeq),
    errorCode: r.error?.code ?? "",
    errorMessage: r.error?.message ?? "",
    createdAt: timestampFromMs(r.createdAt),
    updatedAt: timestampFromMs(r.updatedAt)
  })

/** @internal */
export const toPbSession = (s: Records.Session): pb.Session =>
  create(pb.SessionSchema, {
    id: s.id,
    principal: s.principal,
    key: s.key ?? "",
    channel: s.channel ?? "",
    title: s.title ?? "",
    parentId: s.parentId ?? "",
    parentSeq: BigInt(s.parentSeq ?? 0),
    resetGeneration: s.resetGeneration,
    historyFromSeq: BigInt(s.historyFromSeq),
    tokensUsed: BigInt(s.tokensUsed),
    archived: s.archived,
    createdAt: timestampFromMs(s.createdAt),
    updatedAt: timestampFromMs(s.updatedAt),
    agentId: s.agentId
  })

/** @internal */
export const toPbAgent = (a: Agent.AgentInfo): pb.Agent =>
  create(pb.AgentSchema, {
    id: a.id,
    description: a.description ?? "",
    tools: [...a.tools],
    models: [...a.models],
    routedModels: [...a.routedModels],
    routingThreshold: a.routingThreshold ?? 0
  })

/** @internal */
export const toPbApproval = (a: Records.ApprovalRecord): pb.Approval =>
  create(pb.ApprovalSchema, {
    id: a.id,
    sessionId: a.sessionId,
    runId: a.runId,
    toolCallId: a.toolCallId,
    principal: a.principal,
    tool: a.tool,
    argsDigest: a.argsDigest,
    risk: risks[a.risk],
    summary: a.summary,
    status: statuses[a.status],
    scope: scopes[a.scope],
    requestedAt: timestampFromMs(a.requestedAt),
    expiresAt: timestampFromMs(a.expiresAt),
    ...(ts(a.resolvedAt) ? { resolvedAt: ts(a.resolvedAt)! } : {}),
    resolver: a.resolver ?? "",
    reason: a.reason ?? ""
  })

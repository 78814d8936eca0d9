/**
 * The `PolicyEngine` port decides, for each tool call, `allow`, `deny` or `require_approval`, with
 * the ids of the policies that decided and the reasons. The rule is the same for every engine:
 *
 * any `forbid` on `tool.execute` → deny; a `permit` on `tool.execute` → allow; else any `forbid` on
 * `tool.request_approval` → deny; a `permit` on `tool.request_approval` → require approval; else deny
 * (deny by default: a tool with no permitting policy does not run).
 *
 * `layerRules` is a small, fast engine over declarative rules, for tests and embedding. The Cedar
 * engine implements the same port.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { ApprovalRecord } from "../domain/Records.js"
import type { PolicyDecision, Risk } from "../domain/TapeEvent.js"
import type { SandboxTier } from "./Tool.js"

/** @since 0.1.0 @category Models */
export interface PolicyRequest {
  readonly principal: string
  readonly sessionId: SessionId
  readonly channel: string | null
  /** The id of the agent the session is bound to (engines read absent as `default`). */
  readonly agent?: string | undefined
  readonly tool: {
    readonly name: string
    readonly risk: Risk
    readonly category: string
    /** The sandbox tier of the processes the tool starts; engines read absent as `none`. */
    readonly sandbox?: SandboxTier | undefined
  }
  readonly args: unknown
  /** Digest of the tool name and arguments (what narrow grants bind to). */
  readonly argsDigest?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface Decision {
  readonly decision: PolicyDecision
  readonly policyIds: ReadonlyArray<string>
  readonly reasons: ReadonlyArray<string>
}

/** @since 0.1.0 @category Models */
export interface Service {
  readonly decide: (request: PolicyRequest) => Effect.Effect<Decision>
  /**
   * Standing grants (approvals with scope `session` or `always`) to evaluate as policies. Engines
   * without it leave grants to the approval step, which checks them the same narrow way.
   */
  readonly setGrants?: ((grants: ReadonlyArray<ApprovalRecord>) => Effect.Effect<void>) | undefined
  /**
   * How this engine evaluates a standing grant, in its own policy language (Cedar text for the Cedar
   * engine), for people and consoles to read. Engines without it show nothing.
   */
  readonly describeGrant?: ((grant: ApprovalRecord) => string) | undefined
}

/** @since 0.1.0 @category Tags */
export class PolicyEngine extends Context.Tag("@palyra/core/PolicyEngine")<PolicyEngine, Service>() {}

/** A declarative rule. All given `when` fields must match. @since 0.1.0 @category Models */
export interface Rule {
  readonly id: string
  readonly effect: "permit" | "forbid"
  readonly action: "tool.execute" | "tool.request_approval"
  readonly when?:
    | {
        readonly tools?: ReadonlyArray<string> | undefined
        readonly risk?: ReadonlyArray<Risk> | undefined
        readonly categories?: ReadonlyArray<string> | undefined
        readonly principals?: ReadonlyArray<string> | undefined
        /** Sandbox tiers (a tool that declares none counts as `none`). */
        readonly sandbox?: ReadonlyArray<SandboxTier> | undefined
        /** Agent ids (a request without one counts as `default`). */
        readonly agents?: ReadonlyArray<string> | undefined
      }
    | undefined
  readonly reason?: string | undefined
}

/**
 * The default rules: low-risk tools run; sensitive tools need approval; critical tools never run.
 *
 * @since 0.1.0
 * @category Constants
 */
export const defaultRules: ReadonlyArray<Rule> = [
  {
    id: "default.low-risk-allowed",
    effect: "permit",
    action: "tool.execute",
    when: { risk: ["low"] },
    reason: "low-risk tools are allowed"
  },
  {
    id: "default.sensitive-needs-approval",
    effect: "permit",
    action: "tool.request_approval",
    when: { risk: ["sensitive"] },
    reason: "sensitive tools need a human approval"
  },
  {
    id: "default.critical-denied",
    effect: "forbid",
    action: "tool.execute",
    when: { risk: ["critical"] },
    reason: "critical tools are denied"
  },
  {
    id: "default.critical-no-approval",
    effect: "forbid",
    action: "tool.request_approval",
    when: { risk: ["critical"] },
    reason: "critical tools cannot be approved"
  }
]

const matches = (rule: Rule, r: PolicyRequest): boolean => {
  const w = rule.when
  if (w === undefined) return true
  return (
    (w.tools === undefined || w.tools.includes(r.tool.name)) &&
    (w.risk === undefined || w.risk.includes(r.tool.risk)) &&
    (w.categories === undefined || w.categories.includes(r.tool.category)) &&
    (w.principals === undefined || w.principals.includes(r.principal)) &&
    (w.sandbox === undefined || w.sandbox.includes(r.tool.sandbox ?? "none")) &&
    (w.agents === undefined || w.agents.includes(r.agent ?? "default"))
  )
}

/** Apply the decision rule to the matching rules. @since 0.1.0 @category Constructors */
export const decideWithRules = (rules: ReadonlyArray<Rule>, request: PolicyRequest): Decision => {
  const hits = (effect: Rule["effect"], action: Rule["action"]) =>
    rules.filter((rule) => rule.effect === effect && rule.action === action && matches(rule, request))
  const explain = (decision: PolicyDecision, matched: ReadonlyArray<Rule>): Decision => ({
    decision,
    policyIds: matched.map((m) => m.id),
    reasons: matched.map((m) => m.reason ?? `${m.effect} ${m.action}`)
  })
  const forbidExec = hits("forbid", "tool.execute")
  if (forbidExec.length > 0) return explain("deny", forbidExec)
  const permitExec = hits("permit", "tool.execute")
  if (permitExec.length > 0) return explain("allow", permitExec)
  const forbidApproval = hits("forbid", "tool.request_approval")
  if (forbidApproval.length > 0) return explain("deny", forbidApproval)
  const permitApproval = hits("permit", "tool.request_approval")
  if (permitApproval.length > 0) return explain("require_approval", permitApproval)
  return { decision: "deny", policyIds: [], reasons: [`no policy permits ${request.tool.name} (deny by default)`] }
}

/** An epoch-ms instant as ISO 8601, or as a number when no date can show it. */
const instant = (ms: number) => {
  const date = new Date(ms)
  return Number.isNaN(date.getTime()) ? `${ms} ms` : date.toISOString()
}

/**
 * A standing grant in words: what it permits, to whom, how narrowly and until when, e.g.
 * `permit tool.execute of "shell.exec" for "alice" with the approved arguments (digest 3f2a…),
 * until 2026-01-01T00:00:00.000Z, 2 of 5 uses left (always-scope approval by bob)`.
 *
 * @since 0.1.0
 * @category Grants
 */
export const describeGrant = (grant: ApprovalRecord): string => {
  const digest = grant.argsDigest.length > 12 ? `${grant.argsDigest.slice(0, 12)}…` : grant.argsDigest
  const parts = [
    `permit tool.execute of ${JSON.stringify(grant.tool)} for ${JSON.stringify(grant.principal)} ${
      grant.scope === "session" ? `in session ${grant.sessionId}` : `with the approved arguments (digest ${digest})`
    }`
  ]
  if (grant.grantExpiresAt !== null) parts.push(`until ${instant(grant.grantExpiresAt)}`)
  if (grant.grantMaxUses !== null) {
    parts.push(`${Math.max(0, grant.grantMaxUses - grant.grantUses)} of ${grant.grantMaxUses} uses left`)
  }
  return `${parts.join(", ")} (${grant.scope}-scope approval by ${grant.resolver ?? "?"})`
}

/** @since 0.1.0 @category Constructors */
export const makeRules = (rules: ReadonlyArray<Rule> = defaultRules): Service => ({
  decide: (request) => Effect.sync(() => decideWithRules(rules, request)),
  describeGrant
})

/** @since 0.1.0 @category Layers */
export const layerRules = (rules: ReadonlyArray<Rule> = defaultRules): Layer.Layer<PolicyEngine> =>
  Layer.succeed(PolicyEngine, makeRules(rules))

import type { Session } from "../../domain/Records.js"
import type { PolicyRequest } from "../../ports/PolicyEngine.js"
import type { AnyTool } from "../../ports/Tool.js"

/**
 * The policy request for one use of `tool` in `session`: the one shape both the agent loop (a tool
 * call) and context references (a tool use by another door) ask the policy engine with — the
 * session's channel and agent, the tool's own name, risk, category and sandbox, the args as the tool
 * gets them. The principal is the session's unless the caller gives the run's.
 * @internal
 */
export const policyRequestFor = (
  session: Session,
  tool: AnyTool,
  args: unknown,
  options: { readonly principal?: string | undefined; readonly argsDigest?: string | undefined } = {}
): PolicyRequest => ({
  principal: options.principal ?? session.principal,
  sessionId: session.id,
  channel: session.channel,
  agent: session.agentId,
  tool: { name: tool.name, risk: tool.risk, category: tool.category, sandbox: tool.sandbox },
  args,
  argsDigest: options.argsDigest
})

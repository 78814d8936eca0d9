/**
 * Agents as data: the id a session is bound to, and what a listing shows of an agent. The registry
 * that holds agents' models, tools and budgets is the kernel's (`Agents`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * The agent every session gets when nothing names one (no `agent` in the request, no binding).
 *
 * @since 0.1.0
 * @category Constants
 */
export const DEFAULT_AGENT = "default"

/**
 * An agent id: 1–64 characters of letters, digits, `.`, `-` and `_`, starting with a letter or digit.
 *
 * @since 0.1.0
 * @category Schemas
 */
export const AgentId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, {
    message: () =>
      "an agent id is 1–64 characters of letters, digits, '.', '-' and '_', starting with a letter or digit"
  })
).annotations({ identifier: "AgentId" })

/**
 * An agent as listings show it: its id, what it is for, the tools it may use (resolved names) and
 * its models (names, in fail-over order; `routedModels`: what answers past its usage threshold).
 *
 * @since 0.1.0
 * @category Schemas
 */
export const AgentInfo = Schema.Struct({
  id: Schema.String,
  description: Schema.NullOr(Schema.String),
  tools: Schema.Array(Schema.String),
  models: Schema.Array(Schema.String),
  routedModels: Schema.Array(Schema.String),
  /** Share of the session token budget past which `routedModels` answer (`null`: no usage rule). */
  routingThreshold: Schema.NullOr(Schema.Number)
}).annotations({ identifier: "AgentInfo" })
/** @since 0.1.0 @category Schemas */
export type AgentInfo = typeof AgentInfo.Type

/**
 * The agent registry: who answers a session. An agent has an id, instructions, a model (or a list
 * that fails over in order), the tools it may use, budgets, and an optional usage rule that routes
 * a session to other (e.g. cheaper) models once it has used a share of its token budget.
 *
 * Every session is bound to one agent when it is created: the one the request names, else the one
 * a binding gives its (channel, account, conversation), else `default`. Unless an agent with id
 * `default` is configured, `default` is the kernel's own model, instructions, budgets and every tool,
 * so a kernel configured without agents behaves as it always did.
 *
 * ```ts
 * const kernel = Kernel.layer({
 *   model,
 *   tools,
 *   agents: [
 *     { id: "support", instructions: "Answer from the knowledge base.", tools: ["kb.*"] },
 *     { id: "ops", model: [primary, backup], tools: ["*"], routing: { threshold: 0.8, model: cheap } }
 *   ],
 *   bindings: [{ channel: "telegram", agent: "support" }]
 * })
 * ```
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Option, Schema } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import { AgentId, type AgentInfo, DEFAULT_AGENT } from "../domain/Agent.js"
import { InvalidArgument } from "../domain/Errors.js"
import type { UsageRoutingPlan } from "../domain/TapeEvent.js"
import { ModelProvider, type Service as ModelService, type ToolSpec } from "../ports/ModelProvider.js"
import { ToolRuntime } from "../ports/Tool.js"

// =============================================================================
// Budgets
// =============================================================================

/** Budgets that end a run. Every field has a safe default. @since 0.1.0 @category Models */
export interface Budgets {
  /** Model calls per run (default 24). */
  readonly maxModelTurns?: number | undefined
  /** Tool executions per run (default 64). */
  readonly maxToolCalls?: number | undefined
  /** Tape entries one model response may produce (default 4,000). */
  readonly maxEventsPerTurn?: number | undefined
  /** Wall-clock limit per run (default 30 minutes). */
  readonly wallClock?: Duration.DurationInput | undefined
  /** Tokens per run, checked before each model call with an estimate of the prompt (default 1,000,000). */
  readonly maxTokensPerRun?: number | undefined
  /** Tokens per session, checked the same way (default 10,000,000). */
  readonly maxTokensPerSession?: number | undefined
}

/** Budgets with every default applied. @since 0.1.0 @category Models */
export interface ResolvedBudgets {
  readonly maxModelTurns: number
  readonly maxToolCalls: number
  readonly maxEventsPerTurn: number
  readonly wallClock: Duration.Duration
  readonly maxTokensPerRun: number
  readonly maxTokensPerSession: number
}

/**
 * Apply the defaults; with two arguments, `over`'s fields win over `base`'s.
 *
 * @since 0.1.0
 * @category Utils
 */
export const resolveBudgets = (base: Budgets = {}, over: Budgets = {}): ResolvedBudgets => ({
  maxModelTurns: over.maxModelTurns ?? base.maxModelTurns ?? 24,
  maxToolCalls: over.maxToolCalls ?? base.maxToolCalls ?? 64,
  maxEventsPerTurn: over.maxEventsPerTurn ?? base.maxEventsPerTurn ?? 4_000,
  wallClock: Duration.decode(over.wallClock ?? base.wallClock ?? "30 minutes"),
  maxTokensPerRun: over.maxTokensPerRun ?? base.maxTokensPerRun ?? 1_000_000,
  maxTokensPerSession: over.maxTokensPerSession ?? base.maxTokensPerSession ?? 10_000_000
})

// =============================================================================
// Definitions
// =============================================================================

/** A model, or several that fail over in order (the next is tried when one fails before answering). @since 0.1.0 @category Models */
export type ModelChoice = ModelService | ReadonlyArray<ModelService>

/**
 * Route a session to other models once it has used `threshold` (a share, `0 < threshold <= 1`) of
 * its token budget (`maxTokensPerSession`), e.g. a cheaper model for long sessions.
 *
 * @since 0.1.0
 * @category Models
 */
export interface UsageRouting {
  readonly threshold: number
  readonly model: ModelChoice
}

/** An agent as configured. @since 0.1.0 @category Models */
export interface Agent {
  /** See `AgentId` (`default` replaces the kernel's implicit default agent). */
  readonly id: string
  readonly description?: string | undefined
  /** System instructions sent with every model call of its sessions. */
  readonly instructions?: string | undefined
  /** Its model, or a fail-over list (default: the kernel's model). */
  readonly model?: ModelChoice | undefined
  /**
   * The tools it may use: names, `ns.*` for every tool whose name starts with `ns.`, or `*` for all
   * (default `["*"]`). A tool outside the list is never offered to its model, and a call to one
   * is answered `unknown tool` without running.
   */
  readonly tools?: ReadonlyArray<string> | undefined
  /** Its budgets, over the kernel's. */
  readonly budgets?: Budgets | undefined
  readonly routing?: UsageRouting | undefined
}

/**
 * Which agent answers new sessions of a (channel, account, conversation) when the message names
 * none. `account` and `conversation` left out match any; the most specific binding wins
 * (conversation over account over channel alone).
 *
 * @since 0.1.0
 * @category Models
 */
export interface Binding {
  readonly channel: string
  readonly account?: string | undefined
  readonly conversation?: string | undefined
  readonly agent: string
}

/** An agent with everything resolved: its models, the tools it may use, its budgets. @since 0.1.0 @category Models */
export interface ResolvedAgent {
  readonly id: string
  readonly description: string | null
  readonly instructions: string | undefined
  readonly models: NonEmptyReadonlyArray<ModelService>
  readonly routing: { readonly threshold: number; readonly models: NonEmptyReadonlyArray<ModelService> } | undefined
  /** The tools as its model sees them (only the ones it may use). */
  readonly toolSpecs: ReadonlyArray<ToolSpec>
  /** Whether it may use the tool with this name. */
  readonly allows: (tool: string) => boolean
  readonly budgets: ResolvedBudgets
}

/** @since 0.1.0 @category Models */
export interface Service {
  readonly get: (id: string) => Option.Option<ResolvedAgent>
  /** Every agent, `default` first. */
  readonly list: ReadonlyArray<ResolvedAgent>
  /** The agent a binding gives new sessions of this (channel, account, conversation), if any. */
  readonly bindingFor: (
    channel: string,
    account?: string | undefined,
    conversation?: string | undefined
  ) => Option.Option<string>
}

/** @since 0.1.0 @category Tags */
export class AgentRegistry extends Context.Tag("@palyra/core/AgentRegistry")<AgentRegistry, Service>() {}

/** @since 0.1.0 @category Models */
export interface Options {
  readonly agents?: ReadonlyArray<Agent> | undefined
  readonly bindings?: ReadonlyArray<Binding> | undefined
}

/** What the implicit `default` agent is made of, and what other agents inherit. @since 0.1.0 @category Models */
export interface Defaults {
  readonly model: ModelChoice
  readonly instructions?: string | undefined
  readonly budgets?: Budgets | undefined
  /** The kernel's tool catalog. */
  readonly tools: ReadonlyArray<ToolSpec>
}

// =============================================================================
// Constructors
// =============================================================================

const invalid = (message: string, field = "agents") => new InvalidArgument({ message, field })

const modelList = (choice: ModelChoice): ReadonlyArray<ModelService> =>
  Array.isArray(choice) ? (choice as ReadonlyArray<ModelService>) : [choice as ModelService]

const nonEmpty = <A>(list: ReadonlyArray<A>): list is NonEmptyReadonlyArray<A> => list.length > 0

const PATTERN = /^(\*|[A-Za-z0-9_-][A-Za-z0-9_.-]*(\.\*)?)$/

const toolFilter = (
  agent: string,
  patterns: ReadonlyArray<string>,
  catalog: ReadonlyArray<ToolSpec>
): Effect.Effect<(tool: string) => boolean, InvalidArgument> =>
  Effect.gen(function* () {
    const names = new Set(catalog.map((t) => t.name))
    let all = false
    const exact = new Set<string>()
    const prefixes: Array<string> = []
    for (const p of patterns) {
      if (!PATTERN.test(p)) return yield* invalid(`agent ${agent}: "${p}" is not a tool name, "ns.*" or "*"`)
      if (p === "*") all = true
      else if (p.endsWith(".*")) {
        const prefix = p.slice(0, -1)
        if (![...names].some((n) => n.startsWith(prefix))) {
          return yield* invalid(`agent ${agent}: "${p}" matches no tool`)
        }
        prefixes.push(prefix)
      } else {
        if (!names.has(p)) return yield* invalid(`agent ${agent}: unknown tool "${p}"`)
        exact.add(p)
      }
    }
    return all ? () => true : (tool: string) => exact.has(tool) || prefixes.some((prefix) => tool.startsWith(prefix))
  })

const resolveAgent = (
  agent: Agent,
  fallback: NonEmptyReadonlyArray<ModelService>,
  defaults: Defaults
): Effect.Effect<ResolvedAgent, InvalidArgument> =>
  Effect.gen(function* () {
    if (!Schema.is(AgentId)(agent.id)) {
      return yield* invalid(
        `agent id "${agent.id}": 1–64 characters of letters, digits, '.', '-' and '_', starting with a letter or digit`
      )
    }
    const models = agent.model === undefined ? fallback : modelList(agent.model)
    if (!nonEmpty(models)) return yield* invalid(`agent ${agent.id}: its model list is empty`)
    let routing: ResolvedAgent["routing"]
    if (agent.routing !== undefined) {
      const { threshold } = agent.routing
      if (!(Number.isFinite(threshold) && threshold > 0 && threshold <= 1)) {
        return yield* invalid(`agent ${agent.id}: routing threshold must be a share of the budget, in (0, 1]`)
      }
      const routed = modelList(agent.routing.model)
      if (!nonEmpty(routed)) return yield* invalid(`agent ${agent.id}: its routing model list is empty`)
      routing = { threshold, models: routed }
    }
    const allows = yield* toolFilter(agent.id, agent.tools ?? ["*"], defaults.tools)
    return {
      id: agent.id,
      description: agent.description ?? null,
      instructions: agent.instructions,
      models,
      routing,
      toolSpecs: defaults.tools.filter((t) => allows(t.name)),
      allows,
      budgets: resolveBudgets(defaults.budgets, agent.budgets)
    }
  })

const specificity = (b: Binding) => (b.conversation === undefined ? 0 : 2) + (b.account === undefined ? 0 : 1)

/**
 * Build a registry: the configured agents, plus the implicit `default` one (unless configured).
 * Every agent id, tool name, threshold and binding is checked here (`InvalidArgument`).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options & { readonly defaults: Defaults }): Effect.Effect<Service, InvalidArgument> =>
  Effect.gen(function* () {
    const { defaults } = options
    const configured = options.agents ?? []
    const seen = new Set<string>()
    for (const a of configured) {
      if (seen.has(a.id)) return yield* invalid(`agent ${a.id} is configured twice`)
      seen.add(a.id)
    }
    const explicitDefault = configured.find((a) => a.id === DEFAULT_AGENT)
    const kernelModels = modelList(defaults.model)
    if (!nonEmpty(kernelModels)) return yield* invalid("the default agent has no model", "model")
    const first = yield* resolveAgent(
      explicitDefault ?? { id: DEFAULT_AGENT, instructions: defaults.instructions },
      kernelModels,
      defaults
    )
    const agents = new Map<string, ResolvedAgent>([[DEFAULT_AGENT, first]])
    for (const a of configured) {
      if (a.id !== DEFAULT_AGENT) agents.set(a.id, yield* resolveAgent(a, first.models, defaults))
    }
    const bindings = options.bindings ?? []
    const keys = new Set<string>()
    for (const b of bindings) {
      if (!agents.has(b.agent))
        return yield* invalid(`binding for channel ${b.channel}: unknown agent ${b.agent}`, "bindings")
      const key = JSON.stringify([b.channel, b.account ?? null, b.conversation ?? null])
      if (keys.has(key)) return yield* invalid(`two bindings for the same ${key}`, "bindings")
      keys.add(key)
    }
    // Most specific first; among equals, the order given.
    const ordered = bindings
      .map((b, i) => ({ b, i }))
      .sort((x, y) => specificity(y.b) - specificity(x.b) || x.i - y.i)
      .map(({ b }) => b)
    const list = [...agents.values()]
    return {
      get: (id) => Option.fromNullable(agents.get(id)),
      list,
      bindingFor: (channel, account, conversation) =>
        Option.fromNullable(
          ordered.find(
            (b) =>
              b.channel === channel &&
              (b.account === undefined || b.account === account) &&
              (b.conversation === undefined || b.conversation === conversation)
          )?.agent
        )
    }
  })

/**
 * The registry over the context's `ModelProvider` (the default agent's model, unless an agent with
 * id `default` is configured) and `ToolRuntime` (the catalog agents pick their tools from).
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (
  options: Options & { readonly instructions?: string | undefined; readonly budgets?: Budgets | undefined }
): Layer.Layer<AgentRegistry, InvalidArgument, ModelProvider | ToolRuntime> =>
  Layer.effect(
    AgentRegistry,
    Effect.gen(function* () {
      const model = yield* ModelProvider
      const tools = yield* ToolRuntime
      return yield* make({
        ...options,
        defaults: { model, instructions: options.instructions, budgets: options.budgets, tools: tools.specs }
      })
    })
  )

// =============================================================================
// Accessors and routing
// =============================================================================

/**
 * The agent a binding gives new sessions of a (channel, account, conversation), if any.
 *
 * @since 0.1.0
 * @category Accessors
 */
export const bindingFor = (
  channel: string,
  account?: string | undefined,
  conversation?: string | undefined
): Effect.Effect<Option.Option<string>, never, AgentRegistry> =>
  Effect.map(AgentRegistry, (registry) => registry.bindingFor(channel, account, conversation))

/** What a listing shows of an agent. @since 0.1.0 @category Accessors */
export const info = (agent: ResolvedAgent): AgentInfo => ({
  id: agent.id,
  description: agent.description,
  tools: agent.toolSpecs.map((t) => t.name),
  models: agent.models.map((m) => m.name),
  routedModels: agent.routing?.models.map((m) => m.name) ?? [],
  routingThreshold: agent.routing?.threshold ?? null
})

/** The models for one call, in fail-over order, and the plan that explains them (attempt 0). @since 0.1.0 @category Models */
export interface Route {
  readonly models: NonEmptyReadonlyArray<ModelService>
  readonly plan: UsageRoutingPlan
}

/**
 * Choose the models for a model call of a session that has used `usedTokens`: the agent's routed
 * models at or past its usage threshold, its own models otherwise.
 *
 * @since 0.1.0
 * @category Routing
 */
export const route = (agent: ResolvedAgent, usedTokens: number): Route => {
  const budgetTokens = agent.budgets.maxTokensPerSession
  const plan = (
    rule: UsageRoutingPlan["rule"],
    models: NonEmptyReadonlyArray<ModelService>,
    thresholdTokens: number | null,
    reason: string
  ): Route => ({
    models,
    plan: {
      agent: agent.id,
      rule,
      reason,
      usedTokens,
      budgetTokens,
      thresholdTokens,
      candidates: models.map((m) => m.name),
      attempt: 0
    }
  })
  if (agent.routing === undefined) return plan("primary", agent.models, null, `agent ${agent.id} has no usage rule`)
  const threshold = Math.floor(agent.routing.threshold * budgetTokens)
  const share = `${Math.round(agent.routing.threshold * 100)}%`
  return usedTokens >= threshold
    ? plan(
        "usage",
        agent.routing.models,
        threshold,
        `session used ${usedTokens} of ${budgetTokens} tokens, at or past the ${share} threshold (${threshold})`
      )
    : plan(
        "primary",
        agent.models,
        threshold,
        `session used ${usedTokens} of ${budgetTokens} tokens, under the ${share} threshold (${threshold})`
      )
}

/**
 * `[[agents]]` and `[budgets]` from palyra.toml to the kernel's options: each model spec through
 * `Models.fromSpec` (a list stays a list, so the kernel fails over between them and the tape's
 * routing plan names each candidate).
 *
 * @since 0.1.0
 * @internal
 */
import type { Agents, Errors, ModelProvider } from "@palyra/core"
import { Models } from "@palyra/core/models"
import { Duration, Effect } from "effect"
import type { AgentEntry, BudgetsSection } from "../Config.js"

/** `[budgets]` (snake_case, seconds) as kernel budgets. @since 0.1.0 @category Constructors @internal */
export const budgetsOf = (b: BudgetsSection): Agents.Budgets => ({
  maxModelTurns: b.max_model_turns,
  maxToolCalls: b.max_tool_calls,
  maxEventsPerTurn: b.max_events_per_turn,
  wallClock: b.wall_clock_seconds === undefined ? undefined : Duration.seconds(b.wall_clock_seconds),
  maxTokensPerRun: b.max_tokens_per_run,
  maxTokensPerSession: b.max_tokens_per_session
})

const models = (
  specs: string | ReadonlyArray<string>,
  env: Record<string, string | undefined>
): Effect.Effect<ReadonlyArray<ModelProvider.Service>, Errors.InvalidArgument> =>
  Effect.forEach(
    (typeof specs === "string" ? specs.split(",") : specs).map((s) => s.trim()).filter((s) => s.length > 0),
    (spec) => Models.fromSpec(spec, env)
  )

/**
 * The configured agents, their models built (a missing key or package fails here, naming it).
 *
 * @since 0.1.0
 * @category Constructors
 * @internal
 */
export const agentsOf = (
  entries: ReadonlyArray<AgentEntry>,
  env: Record<string, string | undefined>
): Effect.Effect<Array<Agents.Agent>, Errors.InvalidArgument> =>
  Effect.forEach(entries, (a) =>
    Effect.gen(function* () {
      return {
        id: a.id,
        description: a.description,
        instructions: a.instructions,
        model: a.model === undefined ? undefined : yield* models(a.model, env),
        tools: a.tools,
        budgets: a.budgets === undefined ? undefined : budgetsOf(a.budgets),
        routing:
          a.routing === undefined
            ? undefined
            : { threshold: a.routing.threshold, model: yield* models(a.routing.model, env) }
      }
    })
  )

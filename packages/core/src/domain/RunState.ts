/**
 * The run state machine: a pure function from (state, transition) to the next state or a typed
 * `InvalidTransition`. It never overwrites silently; terminal states stay terminal.
 *
 * ```
 * Pending ─Accept─► Accepted ─Start─► InProgress ⇄ WaitingForApproval
 *                                        │ Complete
 *                                        ▼
 *                                       Done          (Cancel | Fail from every non-terminal state)
 * ```
 *
 * @since 0.1.0
 */
import { Either, Schema } from "effect"
import { InvalidTransition } from "./Errors.js"

/** @since 0.1.0 @category Models */
export const RunState = Schema.Literal(
  "Pending",
  "Accepted",
  "InProgress",
  "WaitingForApproval",
  "Done",
  "Cancelled",
  "Failed"
)
/** @since 0.1.0 @category Models */
export type RunState = typeof RunState.Type

/** @since 0.1.0 @category Models */
export const Transition = Schema.Literal(
  "Accept",
  "Start",
  "AwaitApproval",
  "ApprovalResolved",
  "Complete",
  "Cancel",
  "Fail"
)
/** @since 0.1.0 @category Models */
export type Transition = typeof Transition.Type

/** Every state, for exhaustive checks and property tests. @since 0.1.0 @category Constants */
export const states: ReadonlyArray<RunState> = RunState.literals
/** Every transition. @since 0.1.0 @category Constants */
export const transitions: ReadonlyArray<Transition> = Transition.literals

const terminal: ReadonlySet<RunState> = new Set<RunState>(["Done", "Cancelled", "Failed"])

/** @since 0.1.0 @category Predicates */
export const isTerminal = (state: RunState): boolean => terminal.has(state)

const table: Readonly<Record<RunState, Partial<Record<Transition, RunState>>>> = {
  Pending: { Accept: "Accepted" },
  Accepted: { Start: "InProgress" },
  InProgress: { AwaitApproval: "WaitingForApproval", Complete: "Done" },
  WaitingForApproval: { ApprovalResolved: "InProgress" },
  Done: {},
  Cancelled: {},
  Failed: {}
}

/**
 * The transition function. `Cancel` and `Fail` are legal from every non-terminal state.
 *
 * @since 0.1.0
 * @category Transitions
 */
export const transition = (state: RunState, event: Transition): Either.Either<RunState, InvalidTransition> => {
  if (!terminal.has(state)) {
    if (event === "Cancel") return Either.right("Cancelled")
    if (event === "Fail") return Either.right("Failed")
  }
  const next = table[state][event]
  return next === undefined
    ? Either.left(new InvalidTransition({ from: state, transition: event }))
    : Either.right(next)
}

/**
 * Whether some transition leads from `from` to `to` (what a recorded `RunStateChanged` must satisfy).
 *
 * @since 0.1.0
 * @category Transitions
 */
export const isLegalChange = (from: RunState, to: RunState): boolean => legal.has(`${from}>${to}`)

// Every legal (from, to) pair, computed once: checking one must not build (and throw away) an
// `InvalidTransition` with its stack trace for each transition that does not apply.
const legal: ReadonlySet<string> = new Set(
  states.flatMap((from) =>
    transitions.flatMap((t) => {
      const next = transition(from, t)
      return Either.isRight(next) ? [`${from}>${next.right}`] : []
    })
  )
)

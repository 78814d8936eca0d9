/**
 * A run as its tape tells it: a pure fold over the run's events, and the next thing the agent loop
 * does from there. The loop holds nothing else — resuming after a restart is folding the tape and
 * continuing — so this module is the loop's state, testable without effects.
 *
 * @since 0.1.0
 */
import type { RunId, ToolCallId } from "../domain/Ids.js"
import { isTerminal, type RunState } from "../domain/RunState.js"
import type { TapeEvent, TapeEventOf } from "../domain/TapeEvent.js"

/** One tool call, as far as the tape has it. @since 0.1.0 @category Models */
export interface CallView {
  readonly proposed: TapeEventOf<"ToolProposed">
  readonly decided?: TapeEventOf<"PolicyDecided"> | undefined
  readonly requested?: TapeEventOf<"ApprovalRequested"> | undefined
  readonly resolved?: TapeEventOf<"ApprovalResolved"> | undefined
  readonly started?: TapeEventOf<"ToolStarted"> | undefined
  readonly result?: TapeEventOf<"ToolResult"> | undefined
}

/** @since 0.1.0 @category Models */
export interface RunView {
  readonly runId: RunId
  readonly state: RunState
  /** The highest model turn requested so far. */
  readonly turn: number
  /** Tool executions started (retries count again). */
  readonly toolCallsStarted: number
  /** Tokens this run used, from `Usage` events. */
  readonly tokens: number
  /** Tool calls in the order they were proposed. */
  readonly calls: ReadonlyArray<CallView>
  /** How many calls the last completed model turn proposed (`undefined` before the first answer). */
  readonly lastTurnCalls: number | undefined
  /** A model turn was requested and has not answered yet (resuming redoes it). */
  readonly turnOpen: boolean
}

/** What the loop does next. @since 0.1.0 @category Models */
export type Next =
  | { readonly _tag: "Start" }
  | { readonly _tag: "Call"; readonly call: CallView }
  | { readonly _tag: "ModelTurn" }
  | { readonly _tag: "Complete" }
  | { readonly _tag: "Finished" }

/** A run that has written nothing but its admission. @since 0.1.0 @category Constructors */
export const initial = (runId: RunId, state: RunState = "Accepted"): RunView => ({
  runId,
  state,
  turn: 0,
  toolCallsStarted: 0,
  tokens: 0,
  calls: [],
  lastTurnCalls: undefined,
  turnOpen: false
})

/**
 * A view the loop advances in place (`advance`): one run's fold, owned by that run alone. The loop
 * folds every event it writes into its view; a copy of the view and of its `calls` per event (what
 * `step` returns) was a dozen allocations per tool call on its hot path. Its `calls` entries are
 * replaced, never mutated, so a `CallView` handed out earlier stays what it was.
 * @since 0.1.0 @category Models
 */
export type Mutable = { -readonly [K in keyof RunView]: RunView[K] } & { calls: Array<CallView> }

/** A fresh view the caller owns and may `advance`. @since 0.1.0 @category Constructors */
export const mutable = (view: RunView): Mutable => ({ ...view, calls: view.calls.slice() })

const patchCall = (view: Mutable, id: ToolCallId, patch: (call: CallView) => CallView): boolean => {
  const calls = view.calls
  // The call is nearly always the last one proposed: search from the end.
  for (let i = calls.length - 1; i >= 0; i--) {
    const c = calls[i]!
    if (c.proposed.toolCallId === id) {
      calls[i] = patch(c)
      return true
    }
  }
  return false
}

/**
 * Apply one event to a view the caller owns, in place (`step` without the copies). Events of other
 * runs leave it as it is.
 *
 * @since 0.1.0
 * @category Folding
 */
export const advance = (view: Mutable, e: TapeEvent): void => {
  if (e.runId !== view.runId) return
  switch (e._tag) {
    case "RunStateChanged":
      view.state = e.to
      return
    case "ModelRequest":
      view.turn = Math.max(view.turn, e.turn)
      view.turnOpen = true
      return
    case "AssistantMessage":
      view.lastTurnCalls = 0
      view.turnOpen = false
      return
    case "ToolProposed":
      view.calls.push({ proposed: e })
      view.lastTurnCalls = (view.lastTurnCalls ?? 0) + 1
      return
    case "Usage":
      view.tokens += e.inputTokens + e.outputTokens
      return
    case "PolicyDecided":
      patchCall(view, e.toolCallId, (c) => ({ ...c, decided: e }))
      return
    case "ApprovalRequested":
      patchCall(view, e.toolCallId, (c) => ({ ...c, requested: e }))
      return
    case "ApprovalResolved":
      patchCall(view, e.toolCallId, (c) => ({ ...c, resolved: e }))
      return
    case "ToolStarted":
      if (patchCall(view, e.toolCallId, (c) => ({ ...c, started: e }))) view.toolCallsStarted += 1
      return
    case "ToolResult":
      patchCall(view, e.toolCallId, (c) => ({ ...c, result: e }))
      return
    default:
      return
  }
}

/**
 * Apply one event. Events of other runs (the session's tape holds every run) leave the view as it is.
 *
 * @since 0.1.0
 * @category Folding
 */
export const step = (view: RunView, e: TapeEvent): RunView => {
  if (e.runId !== view.runId) return view
  const next = mutable(view)
  advance(next, e)
  return next
}

/** Fold a run's events (any prefix of its tape) into its view. @since 0.1.0 @category Folding */
export const fold = (runId: RunId, events: Iterable<TapeEvent>, state: RunState = "Accepted"): Mutable => {
  const view = mutable(initial(runId, state))
  for (const e of events) advance(view, e)
  return view
}

/** Calls proposed but without a result yet. @since 0.1.0 @category Accessors */
export const openCalls = (view: RunView): ReadonlyArray<CallView> => view.calls.filter((c) => c.result === undefined)

/**
 * What the loop does from this view: start the run, finish the first open tool call, ask the model,
 * or complete when the model's last answer proposed no call.
 *
 * @since 0.1.0
 * @category Folding
 */
export const next = (view: RunView): Next => {
  if (isTerminal(view.state)) return { _tag: "Finished" }
  if (view.state === "Pending" || view.state === "Accepted") return { _tag: "Start" }
  const open = view.calls.find((c) => c.result === undefined)
  if (open !== undefined) return { _tag: "Call", call: open }
  if (view.lastTurnCalls === 0) return { _tag: "Complete" }
  return { _tag: "ModelTurn" }
}

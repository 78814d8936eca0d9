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

const updateCall = (view: RunView, id: ToolCallId, patch: (call: CallView) => CallView, started = 0): RunView => {
  const i = view.calls.findIndex((c) => c.proposed.toolCallId === id)
  if (i < 0) return view
  const calls = view.calls.slice()
  calls[i] = patch(calls[i]!)
  return { ...view, calls, toolCallsStarted: view.toolCallsStarted + started }
}

/**
 * Apply one event. Events of other runs (the session's tape holds every run) leave the view as it is.
 *
 * @since 0.1.0
 * @category Folding
 */
export const step = (view: RunView, e: TapeEvent): RunView => {
  if (e.runId !== view.runId) return view
  switch (e._tag) {
    case "RunStateChanged":
      return { ...view, state: e.to }
    case "ModelRequest":
      return { ...view, turn: Math.max(view.turn, e.turn), turnOpen: true }
    case "AssistantMessage":
      return { ...view, lastTurnCalls: 0, turnOpen: false }
    case "ToolProposed":
      return { ...view, calls: [...view.calls, { proposed: e }], lastTurnCalls: (view.lastTurnCalls ?? 0) + 1 }
    case "Usage":
      return { ...view, tokens: view.tokens + e.inputTokens + e.outputTokens }
    case "PolicyDecided":
      return updateCall(view, e.toolCallId, (c) => ({ ...c, decided: e }))
    case "ApprovalRequested":
      return updateCall(view, e.toolCallId, (c) => ({ ...c, requested: e }))
    case "ApprovalResolved":
      return updateCall(view, e.toolCallId, (c) => ({ ...c, resolved: e }))
    case "ToolStarted":
      return updateCall(view, e.toolCallId, (c) => ({ ...c, started: e }), 1)
    case "ToolResult":
      return updateCall(view, e.toolCallId, (c) => ({ ...c, result: e }))
    default:
      return view
  }
}

/** Fold a run's events (any prefix of its tape) into its view. @since 0.1.0 @category Folding */
export const fold = (runId: RunId, events: Iterable<TapeEvent>, state: RunState = "Accepted"): RunView => {
  let view = initial(runId, state)
  for (const e of events) view = step(view, e)
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

import { Effect } from "effect"

/** The journal benches' workload: session ids and a realistic tool result event (shared by the journal benches). */
export const OUTPUT =
  "The file lists 12 entries: README.md, package.json, src/, test/, … (a realistic tool output) ".repeat(2)
export const sid = (i: number) => `01KA${String(i).padStart(22, "0")}`
export const event = (s: string, i: number) => ({
  _tag: "ToolResult" as const,
  sessionId: s as never,
  runId: null,
  at: Date.now(),
  toolCallId: "01KA0000000000000000000TC1" as never,
  tool: "fs.list",
  status: "ok" as const,
  output: `${OUTPUT} #${i}`,
  truncated: false,
  durationMs: 3
})

/**
 * `writers` concurrent writers, each awaiting its own `appends` in turn: the closed loop the 32-writer
 * phases measure (`append(w, i)` is writer w's i-th append).
 */
export const closedLoop = <E, R>(
  writers: number,
  appends: number,
  append: (w: number, i: number) => Effect.Effect<unknown, E, R>
) =>
  Effect.forEach(
    Array.from({ length: writers }, (_, w) => w),
    (w) =>
      Effect.forEach(
        Array.from({ length: appends }, (_, i) => i),
        (i) => append(w, i),
        { discard: true }
      ),
    { concurrency: "unbounded", discard: true }
  )

/** The journal benches' workload: session ids and a realistic tool result event (shared by index.ts and appends.ts). */
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

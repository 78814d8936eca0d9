/**
 * Embedding Palyra in an ordinary Node app with the Promise API: no Effect in sight.
 *
 *   pnpm --filter @palyra/examples exec tsx embed-in-node-app/main.ts
 *
 * The model here is the scripted demo model so the example runs offline; swap in a real one
 * (an AI SDK model) in production.
 */
import { createPalyra, defineTool, scriptedModel } from "@palyra/core"

export const main = async (log: (line: string) => void = console.log) => {
  const files = new Map([["notes.txt", "buy milk"]])
  const palyra = createPalyra({
    model: scriptedModel([
      { toolCalls: [{ name: "files.read", args: { name: "notes.txt" } }] },
      { toolCalls: [{ name: "files.delete", args: { name: "notes.txt" } }] },
      { text: ["Your note says ", '"buy milk". ', "I did not delete it."] }
    ]),
    tools: [
      defineTool({
        name: "files.read",
        description: "Read a file",
        parameters: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
        risk: "low",
        execute: async ({ name }: { name: string }) => files.get(name) ?? `no file ${name}`
      }),
      defineTool({
        name: "files.delete",
        description: "Delete a file",
        parameters: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
        risk: "sensitive",
        execute: async ({ name }: { name: string }) => files.delete(name)
      })
    ],
    // Your UI decides; here: never delete.
    onApproval: (approval) => (approval.tool === "files.delete" ? "deny" : "approve")
  })
  try {
    const { runId, events } = await palyra.startRun("What does my note say? Then clean up.")
    for await (const event of events) {
      if (event._tag === "AssistantDelta") log(`assistant: ${event.text}`)
      if (event._tag === "PolicyDecided")
        log(`policy: ${event.tool} -> ${event.decision} (${event.policyIds.join(", ")})`)
      if (event._tag === "ToolResult") log(`tool ${event.tool}: ${event.status} ${event.output}`)
    }
    const run = await palyra.getRun(runId)
    log(`run ${run.state}`)
    return { state: run.state, notesLeft: [...files.keys()] }
  } finally {
    await palyra.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()

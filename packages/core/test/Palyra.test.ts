import { describe, expect, it } from "vitest"
import { createPalyra, defineTool, Errors, isPalyraError, scriptedModel, type TapeEvent } from "../src/index.js"

describe("Promise API (createPalyra)", () => {
  it("runs a tool loop with a Promise-based tool and returns the final answer", async () => {
    const seen: Array<unknown> = []
    const palyra = createPalyra({
      model: scriptedModel([
        { toolCalls: [{ name: "weather", args: { city: "Oslo" } }] },
        { text: "It is 3°C in Oslo." }
      ]),
      tools: [
        defineTool({
          name: "weather",
          description: "Current temperature of a city",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
          risk: "low",
          execute: async (args: { city: string }, ctx) => {
            seen.push(args)
            expect(ctx.signal.aborted).toBe(false)
            await ctx.note(`looked up ${args.city}`)
            return { city: args.city, celsius: 3 }
          }
        })
      ]
    })
    try {
      const result = await palyra.run("Weather in Oslo?")
      expect(result.state).toBe("Done")
      expect(result.text).toBe("It is 3°C in Oslo.")
      expect(seen).toEqual([{ city: "Oslo" }])
      expect(result.events.map((e) => e._tag)).toContain("SessionNote")
      const tape = await palyra.readTape(result.sessionId)
      expect(tape).toEqual(result.events)
      expect((await palyra.verifyJournal()).ok).toBe(true)
    } finally {
      await palyra.close()
    }
  })

  it("asks onApproval for sensitive tools, and honours a denial", async () => {
    const asked: Array<string> = []
    let ran = 0
    await using palyra = createPalyra({
      model: scriptedModel([
        { toolCalls: [{ name: "email.send", args: { to: "a@example.com" } }] },
        { toolCalls: [{ name: "email.send", args: { to: "b@example.com" } }] },
        { text: "Sent one." }
      ]),
      tools: [
        defineTool({
          name: "email.send",
          description: "Send an email",
          parameters: { type: "object", properties: { to: { type: "string" } }, required: ["to"] },
          risk: "sensitive",
          execute: async () => {
            ran++
            return "sent"
          }
        })
      ],
      onApproval: (approval) => {
        asked.push(approval.summary)
        return approval.summary.includes("a@example.com") ? "approve" : { decision: "deny", reason: "not b" }
      }
    })
    const result = await palyra.run("send two emails")
    expect(result.state).toBe("Done")
    expect(asked).toHaveLength(2)
    expect(ran).toBe(1)
    const statuses = result.events.filter((e) => e._tag === "ToolResult").map((e) => (e as { status: string }).status)
    expect(statuses).toEqual(["ok", "denied"])
  })

  it("streams events as an async iterable; the stream's consumer can resolve approvals", async () => {
    let ran = 0
    const palyra = createPalyra({
      model: scriptedModel([{ toolCalls: [{ name: "deploy", args: {} }] }, { text: "Deployed." }]),
      tools: [
        defineTool({
          name: "deploy",
          description: "Deploy",
          parameters: { type: "object" },
          execute: () => {
            ran++
            return "ok"
          }
        })
      ]
    })
    const { runId, events } = await palyra.startRun("deploy it", { sessionKey: "ops" })
    const tags: Array<string> = []
    for await (const event of events as AsyncIterable<TapeEvent.TapeEvent>) {
      tags.push(event._tag)
      if (event._tag === "ApprovalRequested")
        await palyra.resolveApproval(event.approvalId, "approve", { by: "ops-lead" })
    }
    expect(ran).toBe(1)
    expect(tags.at(-1)).toBe("RunStateChanged")
    expect((await palyra.getRun(runId)).state).toBe("Done")
    await palyra.close()
  })

  it("throws Palyra's own typed errors, not wrapped fiber failures", async () => {
    const palyra = createPalyra({ model: scriptedModel([]) })
    try {
      const error = await palyra.getRun("01ARZ3NDEKTSV4RRFFQ69G5FAV").catch((e: unknown) => e)
      expect(error).toBeInstanceOf(Errors.NotFound)
      expect(isPalyraError(error)).toBe(true)
      expect((error as Errors.NotFound).code).toBe("not_found")
      const empty = await palyra.run("").catch((e: unknown) => e)
      expect(empty).toBeInstanceOf(Errors.InvalidArgument)
      const failed = await palyra.run("hello")
      expect(failed.state).toBe("Failed")
      expect(failed.error?.code).toBe("provider_error")
    } finally {
      await palyra.close()
    }
  })

  it("cancels a run from another call", async () => {
    const palyra = createPalyra({
      model: scriptedModel([{ toolCalls: [{ name: "wait", args: {} }] }, { text: "never" }]),
      tools: [
        defineTool({
          name: "wait",
          description: "Waits until aborted",
          parameters: { type: "object" },
          risk: "low",
          execute: (_args, ctx) =>
            new Promise((resolve) => ctx.signal.addEventListener("abort", () => resolve("aborted"), { once: true }))
        })
      ]
    })
    const { runId, events } = await palyra.startRun("wait")
    const tags: Array<string> = []
    const seen: Array<TapeEvent.TapeEvent> = []
    for await (const e of events) {
      tags.push(e._tag)
      seen.push(e)
      if (e._tag === "ToolStarted") await palyra.cancelRun(runId)
    }
    expect((await palyra.getRun(runId)).state).toBe("Cancelled")
    expect(tags).toContain("ToolStarted")
    // The started call is closed before the run ends: no ToolStarted is left without its result.
    expect(tags.slice(-2)).toEqual(["ToolResult", "RunStateChanged"])
    const closed = seen.find((e) => e._tag === "ToolResult")
    expect(closed).toMatchObject({ status: "cancelled" })
    await palyra.close()
  })
})

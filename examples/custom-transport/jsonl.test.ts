import { PassThrough } from "node:stream"
import { ScriptedModel, Tool } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Schema } from "effect"
import { expect, it } from "vitest"
import { serveJsonl } from "./jsonl.js"

it("a one-file JSON-lines transport drives the Gateway: run, approval, typed errors", async () => {
  const sent: Array<string> = []
  const email = Tool.make("email.send", {
    description: "send an email",
    parameters: Schema.Struct({ to: Schema.String }),
    risk: "sensitive",
    execute: ({ to }) => Effect.sync(() => sent.push(to))
  })
  const model = ScriptedModel.make([
    { toolCalls: [{ name: "email.send", args: { to: "a@example.com" } }] },
    { text: "Sent." }
  ])
  const input = new PassThrough()
  const output = new PassThrough()
  const lines: Array<{ event?: { _tag: string; approvalId?: string; to?: string }; error?: { code: string } }> = []
  let buffer = ""
  output.on("data", (chunk: Buffer) => {
    buffer += chunk.toString()
    const parts = buffer.split("\n")
    buffer = parts.pop()!
    for (const line of parts) {
      const parsed = JSON.parse(line)
      lines.push(parsed)
      if (parsed.event?._tag === "ApprovalRequested") {
        input.write(`${JSON.stringify({ op: "approve", approvalId: parsed.event.approvalId, decision: "approve" })}\n`)
      }
      if (parsed.event?._tag === "RunStateChanged" && parsed.event.to === "Done") input.end()
    }
  })
  input.write("this is not json\n")
  input.write(`${JSON.stringify({ op: "cancel", runId: "nope" })}\n`)
  input.write(`${JSON.stringify({ op: "send", text: "email a@example.com", sessionKey: "jsonl" })}\n`)
  await Effect.runPromise(
    serveJsonl(input, output, "alice").pipe(Effect.provide(gatewayLayer({ model, tools: [email] })))
  )
  expect(lines[0]).toEqual({ error: { code: "invalid_argument", message: "not a valid request line" } })
  expect(lines[1]?.error?.code).toBe("invalid_argument") // "nope" is not a run id

  expect(sent).toEqual(["a@example.com"])
  expect(lines.at(-1)?.event).toMatchObject({ _tag: "RunStateChanged", to: "Done" })
})

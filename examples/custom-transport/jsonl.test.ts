import { PassThrough } from "node:stream"
import { Caller, ScriptedModel, Tool } from "@palyra/core"
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
    serveJsonl(input, output, Caller.user("alice")).pipe(Effect.provide(gatewayLayer({ model, tools: [email] })))
  )
  expect(lines[0]).toEqual({ error: { code: "invalid_argument", message: "not a valid request line" } })
  expect(lines[1]?.error?.code).toBe("invalid_argument") // "nope" is not a run id

  expect(sent).toEqual(["a@example.com"])
  expect(lines.at(-1)?.event).toMatchObject({ _tag: "RunStateChanged", to: "Done" })
})

it("the JSON-lines transport is safe by construction: B cannot approve or cancel A's run", async () => {
  const ran: Array<string> = []
  const email = Tool.make("email.send", {
    description: "send an email",
    parameters: Schema.Struct({ to: Schema.String }),
    risk: "sensitive",
    execute: ({ to }) => Effect.sync(() => ran.push(to))
  })
  const model = ScriptedModel.make((request) =>
    request.messages.at(-1)?.role === "tool"
      ? { text: "ok" }
      : { toolCalls: [{ name: "email.send", args: { to: "x" } }] }
  )
  const lines = (stream: PassThrough) => {
    const out: Array<{
      event?: { _tag: string; approvalId?: string; runId?: string; to?: string }
      error?: { code: string }
    }> = []
    let buffer = ""
    stream.on("data", (chunk: Buffer) => {
      buffer += chunk.toString()
      const parts = buffer.split("\n")
      buffer = parts.pop()!
      for (const line of parts) out.push(JSON.parse(line))
    })
    return out
  }
  const program = Effect.gen(function* () {
    const aliceIn = new PassThrough()
    const aliceOut = new PassThrough()
    const alice = lines(aliceOut)
    const aliceDone = yield* Effect.fork(serveJsonl(aliceIn, aliceOut, Caller.user("alice")))
    aliceIn.write(`${JSON.stringify({ op: "send", text: "email x", sessionKey: "a" })}\n`)
    const waiting = yield* Effect.promise(async () => {
      for (let i = 0; i < 200; i++) {
        const e = alice.find((l) => l.event?._tag === "ApprovalRequested")?.event
        if (e) return e
        await new Promise((r) => setTimeout(r, 10))
      }
      throw new Error("no approval requested")
    })
    const bobIn = new PassThrough()
    const bobOut = new PassThrough()
    const bob = lines(bobOut)
    bobIn.write(`${JSON.stringify({ op: "approve", approvalId: waiting.approvalId, decision: "approve" })}\n`)
    bobIn.write(`${JSON.stringify({ op: "cancel", runId: waiting.runId })}\n`)
    bobIn.end()
    yield* serveJsonl(bobIn, bobOut, Caller.user("bob"))
    expect(bob.map((l) => l.error?.code)).toEqual(["not_found", "not_found"])
    expect(ran).toEqual([])
    aliceIn.write(`${JSON.stringify({ op: "approve", approvalId: waiting.approvalId, decision: "approve" })}\n`)
    aliceIn.end()
    yield* aliceDone.await
    expect(ran).toEqual(["x"])
    expect(alice.at(-1)?.event).toMatchObject({ _tag: "RunStateChanged", to: "Done" })
  })
  await Effect.runPromise(program.pipe(Effect.provide(gatewayLayer({ model, tools: [email] }))))
})

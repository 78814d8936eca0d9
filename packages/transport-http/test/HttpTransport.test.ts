import { type Gateway, type Journal, ScriptedModel, Tool } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, type Layer, ManagedRuntime, Schema, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"

const writes: Array<unknown> = []
const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: (args) => Effect.sync(() => writes.push(args))
})
const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  if (last?.role === "tool") return { text: ["Wrote ", "it."] }
  if (last?.role === "user" && last.text.includes("write"))
    return { toolCalls: [{ name: "fs.write", args: { path: "a.txt" } }] }
  return { text: ["Hello ", "there", "!"] }
})

const runtime = ManagedRuntime.make(
  gatewayLayer({ model, tools: [write], policy: CedarPolicy.layer() }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
let base = ""
let scope: Scope.CloseableScope
const ALICE = { authorization: "Bearer alice-token" }
// biome-ignore lint/suspicious/noExplicitAny: test reads loosely shaped JSON
const read = (r: Response): Promise<any> => r.json()
const OPERATOR = { authorization: "Bearer operator-token" }

beforeAll(async () => {
  scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    HttpTransport.serve({
      port: 0,
      tokens: [
        { token: "alice-token", principal: "alice" },
        { token: "bob-token", principal: "bob" },
        { token: "operator-token", principal: "operator", operator: true }
      ],
      maxBodyBytes: 4096
    }).pipe(Scope.extend(scope))
  )
  base = url
})
afterAll(async () => {
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()
})

interface Frame {
  id?: string
  event?: string
  data?: string
}
/** Read SSE frames until `until` says stop; returns them. */
const readSse = async (response: Response, until: (f: Frame) => boolean, onFrame?: (f: Frame) => Promise<void>) => {
  expect(response.headers.get("content-type")).toMatch(/text\/event-stream/)
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  const frames: Array<Frame> = []
  while (true) {
    const { done, value } = await reader.read()
    if (done) break
    buffer += decoder.decode(value, { stream: true })
    let cut = buffer.indexOf("\n\n")
    while (cut >= 0) {
      const raw = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      cut = buffer.indexOf("\n\n")
      const frame: Frame = {}
      for (const line of raw.split("\n")) {
        const i = line.indexOf(": ")
        if (line.startsWith(":") || i < 0) continue
        ;(frame as Record<string, string>)[line.slice(0, i)] = line.slice(i + 2)
      }
      if (frame.data === undefined) continue
      frames.push(frame)
      if (onFrame) await onFrame(frame)
      if (until(frame)) {
        await reader.cancel()
        return frames
      }
    }
  }
  return frames
}
const isEnd = (f: Frame) => {
  const e = JSON.parse(f.data!)
  return e._tag === "RunStateChanged" && ["Done", "Cancelled", "Failed"].includes(e.to)
}

describe("HTTP transport (real server on 127.0.0.1, real fetch)", () => {
  it("health endpoints need no token; everything else does", async () => {
    expect((await fetch(`${base}/healthz`)).status).toBe(200)
    expect((await fetch(`${base}/readyz`)).status).toBe(200)
    for (const headers of [{}, { authorization: "Bearer wrong" }, { authorization: "Basic abc" }]) {
      const r = await fetch(`${base}/v1/sessions`, { headers })
      expect(r.status).toBe(401)
      expect(await r.json()).toMatchObject({ code: "unauthenticated" })
    }
    const doc = await fetch(`${base}/openapi.json`, { headers: ALICE })
    expect(doc.status).toBe(200)
    expect((await read(doc)).paths["/v1/runs"].post).toBeDefined()
  })

  it("a chat with an approved tool, streamed over SSE; the approval goes through REST", async () => {
    const response = await fetch(`${base}/v1/runs?stream=true`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "please write a.txt", sessionKey: "chat" })
    })
    expect(response.status).toBe(200)
    const frames = await readSse(response, isEnd, async (f) => {
      const e = JSON.parse(f.data!)
      if (e._tag === "ApprovalRequested") {
        const approve = await fetch(`${base}/v1/approvals/${e.approvalId}`, {
          method: "POST",
          headers: { ...ALICE, "content-type": "application/json" },
          body: JSON.stringify({ decision: "approve" })
        })
        expect(approve.status).toBe(200)
        expect((await read(approve)).status).toBe("approved")
      }
    })
    const events = frames.map((f) => JSON.parse(f.data!))
    expect(events.map((e) => e._tag)).toContain("ToolResult")
    expect(events.at(-1)).toMatchObject({ _tag: "RunStateChanged", to: "Done" })
    expect(frames.map((f) => Number(f.id))).toEqual(events.map((e) => e.tapeSeq))
    expect(writes).toEqual([{ path: "a.txt" }])
  })

  it("standing grants: approve with scope always and limits, list them as Cedar, revoke (409 the second time)", async () => {
    const response = await fetch(`${base}/v1/runs?stream=true`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "write once more", sessionKey: "grants" })
    })
    let grantId = ""
    await readSse(response, isEnd, async (f) => {
      const e = JSON.parse(f.data!)
      if (e._tag === "ApprovalRequested") {
        grantId = e.approvalId
        const r = await fetch(`${base}/v1/approvals/${e.approvalId}`, {
          method: "POST",
          headers: { ...ALICE, "content-type": "application/json" },
          body: JSON.stringify({ decision: "approve", scope: "always", expiresInSeconds: 3600, maxUses: 5 })
        })
        expect(r.status).toBe(200)
      }
    })
    const grants = await read(await fetch(`${base}/v1/grants`, { headers: ALICE }))
    const grant = grants.find((g: { id: string }) => g.id === grantId)
    expect(grant).toMatchObject({ status: "approved", scope: "always", grantMaxUses: 5 })
    expect(grant.policy).toMatch(/permit \(\s*principal == Palyra::Principal::"alice"/)
    expect(grant.policy).toMatch(/context\.now < \d+/)
    const bobSees = await read(await fetch(`${base}/v1/grants`, { headers: { authorization: "Bearer bob-token" } }))
    expect(bobSees).toEqual([])
    const revoke = () => fetch(`${base}/v1/grants/${grantId}/revoke`, { method: "POST", headers: ALICE })
    const first = await revoke()
    expect(first.status).toBe(200)
    expect((await read(first)).status).toBe("revoked")
    const second = await revoke()
    expect(second.status).toBe(409)
  })

  it("resumes a session's event stream after Last-Event-ID with no gap and no duplicate", async () => {
    const sent = await fetch(`${base}/v1/runs`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "hi", sessionKey: "resume" })
    })
    expect(sent.status).toBe(202)
    const { sessionId, runId } = await read(sent)
    // Wait for the run to finish, then read the tape.
    for (let i = 0; i < 100; i++) {
      const run = await read(await fetch(`${base}/v1/runs/${runId}`, { headers: ALICE }))
      if (run.state === "Done") break
      await new Promise((r) => setTimeout(r, 20))
    }
    const tape = await read(await fetch(`${base}/v1/sessions/${sessionId}/tape`, { headers: ALICE }))
    expect(tape.length).toBeGreaterThan(5)
    const cut = 3
    const resumed = await fetch(`${base}/v1/sessions/${sessionId}/events`, {
      headers: { ...ALICE, "last-event-id": String(cut) }
    })
    const frames = await readSse(resumed, (f) => Number(f.id) === tape.at(-1).tapeSeq)
    expect(frames.map((f) => JSON.parse(f.data!))).toEqual(tape.slice(cut))
  })

  it("bad input gets a typed error and stores nothing", async () => {
    const before = await read(await fetch(`${base}/v1/sessions`, { headers: ALICE }))
    const post = (body: string, path = "/v1/runs") =>
      fetch(`${base}${path}`, { method: "POST", headers: { ...ALICE, "content-type": "application/json" }, body })
    const notJson = await post("{nope")
    expect(notJson.status).toBe(400)
    expect(await notJson.json()).toMatchObject({ code: "invalid_argument" })
    const missing = await post(JSON.stringify({ sessionKey: "x" }))
    expect(missing.status).toBe(400)
    const empty = await post(JSON.stringify({ text: "" }))
    expect(empty.status).toBe(400)
    const huge = await post(JSON.stringify({ text: "x".repeat(10_000) }))
    expect(huge.status).toBe(413)
    expect(await huge.json()).toMatchObject({ code: "payload_too_large" })
    const badId = await fetch(`${base}/v1/runs/not-a-ulid`, { headers: ALICE })
    expect(badId.status).toBe(400)
    const unknown = await fetch(`${base}/v1/runs/01KA0000000000000000000000`, { headers: ALICE })
    expect(unknown.status).toBe(404)
    const badDecision = await post(JSON.stringify({ decision: "maybe" }), "/v1/approvals/01KA0000000000000000000000")
    expect(badDecision.status).toBe(400)
    const after = await read(await fetch(`${base}/v1/sessions`, { headers: ALICE }))
    expect(after).toEqual(before)
  })

  it("principals are isolated; only operators verify the journal", async () => {
    const mine = await read(await fetch(`${base}/v1/sessions`, { headers: ALICE }))
    expect(mine.length).toBeGreaterThan(0)
    const bobs = await read(await fetch(`${base}/v1/sessions`, { headers: { authorization: "Bearer bob-token" } }))
    expect(bobs).toEqual([])
    const peek = await fetch(`${base}/v1/sessions/${mine[0].id}/tape`, {
      headers: { authorization: "Bearer bob-token" }
    })
    expect(peek.status).toBe(404)
    const denied = await fetch(`${base}/v1/journal/verify`, { headers: ALICE })
    expect(denied.status).toBe(403)
    const verify = await fetch(`${base}/v1/journal/verify`, { headers: OPERATOR })
    expect(await verify.json()).toMatchObject({ ok: true })
  })

  it("principal B can neither read nor change A's sessions, runs, approvals, grants or tape: 404 like a missing id", async () => {
    const BOB = { authorization: "Bearer bob-token", "content-type": "application/json" }
    const response = await fetch(`${base}/v1/runs?stream=true`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "write for isolation", sessionKey: "isolation" })
    })
    const attempts: Array<{ what: string; status: number; body: { code: string; message: string } }> = []
    let runState = ""
    await readSse(response, isEnd, async (f) => {
      const e = JSON.parse(f.data!)
      if (e._tag !== "ApprovalRequested") return
      const { sessionId, runId, approvalId } = e
      const missing = "01KA0000000000000000000000"
      const tries: Array<[string, string, string, unknown?]> = [
        ["get run", "GET", `/v1/runs/${runId}`],
        ["cancel run", "POST", `/v1/runs/${runId}/cancel`],
        ["get session", "GET", `/v1/sessions/${sessionId}`],
        ["reset session", "POST", `/v1/sessions/${sessionId}/reset`],
        ["branch session", "POST", `/v1/sessions/${sessionId}/branch`, {}],
        ["read tape", "GET", `/v1/sessions/${sessionId}/tape`],
        ["subscribe", "GET", `/v1/sessions/${sessionId}/events`],
        ["send into session", "POST", "/v1/runs", { text: "hi", sessionId }],
        ["get approval", "GET", `/v1/approvals/${approvalId}`],
        ["resolve approval", "POST", `/v1/approvals/${approvalId}`, { decision: "approve", scope: "always" }],
        ["revoke grant", "POST", `/v1/grants/${approvalId}/revoke`],
        ["missing run", "GET", `/v1/runs/${missing}`],
        ["missing session", "GET", `/v1/sessions/${missing}/tape`],
        ["missing approval", "POST", `/v1/approvals/${missing}`, { decision: "approve" }]
      ]
      for (const [what, method, path, body] of tries) {
        const r = await fetch(`${base}${path}`, {
          method,
          headers: BOB,
          ...(body === undefined ? {} : { body: JSON.stringify(body) })
        })
        attempts.push({ what, status: r.status, body: await read(r) })
      }
      const listed = await read(await fetch(`${base}/v1/approvals?status=pending`, { headers: BOB }))
      expect(listed).toEqual([])
      runState = (await read(await fetch(`${base}/v1/runs/${runId}`, { headers: ALICE }))).state
      const r = await fetch(`${base}/v1/approvals/${approvalId}`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ decision: "deny" })
      })
      expect(r.status).toBe(200)
    })
    // Every attempt, on what exists and on what does not, answers alike.
    for (const a of attempts) {
      expect({ what: a.what, status: a.status, code: a.body.code }).toEqual({
        what: a.what,
        status: 404,
        code: "not_found"
      })
    }
    expect(runState).toBe("WaitingForApproval")
    const bobsGrants = await read(await fetch(`${base}/v1/grants`, { headers: BOB }))
    expect(bobsGrants).toEqual([])
  })
})

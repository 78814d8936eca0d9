/**
 * The OpenAPI document is derived from the API, so it cannot drift from the routes; this test
 * checks it cannot drift from the *answers* either. The document must be valid OpenAPI 3.1
 * (`@seriousme/openapi-schema-validator`), and for every operation in it a real request to the
 * running server must answer with a documented status whose body matches the documented schema
 * (Ajv 2020 over the dereferenced document). Error answers are checked the same way.
 */
import { dereference } from "@apidevtools/json-schema-ref-parser"
import { ScriptedModel, Tool } from "@palyra/core"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Ajv2020 } from "ajv/dist/2020.js"
import addFormats from "ajv-formats"
import { Effect, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Sse } from "../src/index.js"
import { ALICE, BOB, json, OPERATOR, startServer, type TestServer } from "./fixtures.js"

const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: () => Effect.void
})
const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  if (last?.role === "tool") return { text: "Wrote it." }
  if (last?.role === "user" && last.text.includes("write"))
    return { toolCalls: [{ name: "fs.write", args: { path: "a" } }] }
  return { text: ["Hello ", "there!"] }
})

// biome-ignore lint/suspicious/noExplicitAny: an OpenAPI document is loosely shaped JSON
type Json = any

let server: TestServer
let document: Json
let resolved: Json

beforeAll(async () => {
  // Approvals wait without a connected channel here, so a pending one can be resolved over REST.
  server = await startServer({
    model,
    tools: [write],
    gateway: { requireApprovalChannel: false, agents: [{ id: "other", tools: [] }] },
    afterRun: true
  })
  document = await (await fetch(`${server.base}/openapi.json`, { headers: ALICE })).json()
  resolved = await dereference(structuredClone(document))
})
afterAll(() => server.close())

const ajv = new Ajv2020({ strict: false, allErrors: true })
addFormats.default(ajv)
/** `$id`s repeat once the document is dereferenced; they carry no constraint, so drop them. */
const withoutIds = (schema: Json): Json =>
  JSON.parse(JSON.stringify(schema, (key, value) => (key === "$id" ? undefined : value)))

const operations = (): Array<{ path: string; method: string; id: string }> =>
  Object.entries(document.paths).flatMap(([path, item]) =>
    Object.entries(item as Json).map(([method, op]) => ({ path, method, id: (op as Json).operationId }))
  )

const opById = (id: string): { path: string; method: string } => {
  const found = operations().find((o) => o.id === id)
  if (found === undefined) throw new Error(`operation ${id} is not in the document`)
  return found
}

const checked: Array<string> = []

/** Check one answer against what the document says operation `id` answers. */
const conforms = async (id: string, response: Response) => {
  const { path, method } = opById(id)
  const op = resolved.paths[path][method]
  const documented = op.responses[String(response.status)]
  expect(documented, `${id} answered ${response.status}, which the document does not list`).toBeDefined()
  const contentType = response.headers.get("content-type") ?? ""
  const content = documented.content ?? {}
  if (contentType.startsWith("text/event-stream")) {
    expect(Object.keys(content), `${id} streams, but the document does not say so`).toContain("text/event-stream")
    for await (const _ of Sse.fromResponse(response)) break
  } else if (contentType.startsWith("application/json")) {
    const schema = content["application/json"]?.schema
    expect(schema, `${id} ${response.status} has no JSON schema`).toBeDefined()
    const body = await response.json()
    const validate = ajv.compile(withoutIds(schema))
    const valid = validate(body)
    expect(
      valid,
      `${id} ${response.status}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body).slice(0, 500)}`
    ).toBe(true)
  } else {
    const text = await response.text()
    const type = Object.keys(content)[0] ?? ""
    expect(contentType.split(";")[0], `${id} ${response.status} content type`).toBe(type.split(";")[0])
    expect(typeof text).toBe("string")
  }
  checked.push(`${id} ${response.status}`)
}

const call = (method: string, path: string, options: { headers?: Record<string, string>; body?: unknown } = {}) =>
  fetch(`${server.base}${path}`, {
    method,
    headers: {
      ...ALICE,
      ...(options.body === undefined ? {} : { "content-type": "application/json" }),
      ...options.headers
    },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
  })

const poll = async <A>(read: () => Promise<A>, until: (a: A) => boolean): Promise<A> => {
  for (let i = 0; i < 200; i++) {
    const value = await read()
    if (until(value)) return value
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error("condition not reached")
}

describe("the OpenAPI document", () => {
  it("is valid OpenAPI 3.1", async () => {
    const result = await new Validator().validate(document)
    expect(result.errors ?? []).toEqual([])
    expect(result.valid).toBe(true)
    expect(document.openapi).toBe("3.1.0")
  })

  it("every operation answers a real request as documented, successes and errors alike", async () => {
    const MISSING = "01KA0000000000000000000000"
    // A run that waits for approval, and its session.
    const accepted = await call("POST", "/v1/runs", { body: { text: "please write", sessionKey: "contract" } })
    const { runId, sessionId } = await json(accepted.clone())
    await conforms("runs.create", accepted)
    await poll(
      async () => (await json(await call("GET", `/v1/runs/${runId}`))).state,
      (state) => state === "WaitingForApproval"
    )
    const [pending] = await json(await call("GET", `/v1/approvals?status=pending&runId=${runId}`))
    const approvalId: string = pending.id
    // A finished run whose reflection leaves a fact in memory and two candidates for review.
    const taught = await json(
      await call("POST", "/v1/runs", {
        body: {
          text: "Remember that staging listens on 5433. I usually deploy on Fridays. I like tea.",
          sessionKey: "mem"
        }
      })
    )
    const candidates = await poll(
      async () => json(await call("GET", "/v1/learning/candidates")),
      (list: Array<{ id: string }>) => list.length === 2
    )
    const [hit] = await json(await call("GET", "/v1/memory?q=staging"))
    const [reflection] = await json(await call("GET", "/v1/tasks?state=succeeded", { headers: OPERATOR }))
    expect(reflection.payload.runId).toBe(taught.runId)

    const signedIn = await fetch(`${server.base}/v1/auth/session`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token: "alice-token" })
    })
    const cookie = (signedIn.headers.get("set-cookie") ?? "").split(";", 1)[0] ?? ""
    const { csrfToken } = await json(signedIn.clone())
    await conforms("auth.signIn", signedIn)

    const requests: Record<string, () => Promise<Response>> = {
      "health.healthz": () => fetch(`${server.base}/healthz`),
      "health.readyz": () => fetch(`${server.base}/readyz`),
      "meta.openapi": () => call("GET", "/openapi.json"),
      "meta.metrics": () => call("GET", "/metrics"),
      "runs.create": () =>
        call("POST", "/v1/runs?stream=true", { body: { text: "hi", sessionKey: "contract-stream" } }),
      "runs.get": () => call("GET", `/v1/runs/${runId}`),
      "sessions.list": () => call("GET", "/v1/sessions?limit=10&archived=false"),
      "sessions.create": () => call("POST", "/v1/sessions", { body: { sessionKey: "made", title: "Made" } }),
      "agents.list": () => call("GET", "/v1/agents"),
      "sessions.get": () => call("GET", `/v1/sessions/${sessionId}`),
      "sessions.tape": () => call("GET", `/v1/sessions/${sessionId}/tape?after=0&limit=100`),
      "sessions.events": () => call("GET", `/v1/sessions/${sessionId}/events`, { headers: { "last-event-id": "2" } }),
      "approvals.list": () => call("GET", `/v1/approvals?sessionId=${sessionId}`),
      "approvals.get": () => call("GET", `/v1/approvals/${approvalId}`),
      "approvals.resolve": () =>
        call("POST", `/v1/approvals/${approvalId}`, { body: { decision: "approve", scope: "always", maxUses: 3 } }),
      "grants.list": () => call("GET", "/v1/grants"),
      "grants.revoke": () => call("POST", `/v1/grants/${approvalId}/revoke`),
      "journal.verify": () => call("GET", "/v1/journal/verify", { headers: OPERATOR }),
      "sessions.branch": () => call("POST", `/v1/sessions/${sessionId}/branch`, { body: { atSeq: 1, title: "b" } }),
      "sessions.reset": () => call("POST", `/v1/sessions/${sessionId}/reset`),
      // This server has no context engine: compaction answers its documented 409.
      "sessions.compact": () => call("POST", `/v1/sessions/${sessionId}/compact?preview=true`),
      "sessions.checkpoints": () => call("GET", `/v1/sessions/${sessionId}/checkpoints`),
      "sessions.restore": () =>
        call("POST", `/v1/sessions/${sessionId}/restore`, { body: { checkpointId: "01KA0000000000000000000000" } }),
      "runs.cancel": () => call("POST", `/v1/runs/${runId}/cancel`),
      // This server has no channels: pairing answers its documented 409 ("channels are not configured").
      "pairing.mint": () => call("POST", "/v1/pairing/codes", { body: { channel: "tg", principal: "alice" } }),
      "pairing.list": () => call("GET", "/v1/pairing/codes?channel=tg"),
      "pairing.revoke": () => call("DELETE", "/v1/pairing/codes/ZZZZZZZZ"),
      "pairing.identities": () => call("GET", "/v1/pairing/identities?principal=alice"),
      "pairing.unpair": () => call("DELETE", "/v1/pairing/identities/WyJ0ZyIsImEiLCJzIl0"),
      "auth.signIn": () =>
        fetch(`${server.base}/v1/auth/session`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ token: "bad" })
        }),
      "auth.current": () => fetch(`${server.base}/v1/auth/session`, { headers: { cookie } }),
      "auth.csrf": () =>
        fetch(`${server.base}/v1/auth/session/csrf`, {
          method: "POST",
          headers: { cookie, "sec-fetch-site": "same-origin", origin: server.base }
        }),
      "auth.signOut": () =>
        fetch(`${server.base}/v1/auth/session`, { method: "DELETE", headers: { cookie, "x-csrf-token": csrfToken } }),
      "approvalEvents.events": () => call("GET", "/v1/approvals/events"),
      "runList.list": () => call("GET", `/v1/runs?sessionId=${sessionId}&limit=5`),
      "tasks.list": () => call("GET", "/v1/tasks?limit=10", { headers: OPERATOR }),
      // Finished already: 409.
      "tasks.cancel": () => call("POST", `/v1/tasks/${reflection.id}/cancel`, { headers: OPERATOR }),
      "learning.candidates": () => call("GET", "/v1/learning/candidates?status=pending"),
      "learning.accept": () => call("POST", `/v1/learning/candidates/${candidates[0]!.id}/accept`),
      "learning.reject": () =>
        call("POST", `/v1/learning/candidates/${candidates[1]!.id}/reject`, { body: { reason: "no" } }),
      "incidents.list": () => call("GET", "/v1/incidents?open=true", { headers: OPERATOR }),
      "memory.search": () => call("GET", "/v1/memory?q=staging&limit=5"),
      "memory.forget": () => call("DELETE", `/v1/memory/${hit.item.id}`),
      "openai.chatCompletions": () =>
        call("POST", "/v1/chat/completions", {
          body: { model: "palyra", messages: [{ role: "user", content: "hello" }] }
        })
    }
    // The table and the document name the same operations.
    expect(Object.keys(requests).sort()).toEqual(
      operations()
        .map((o) => o.id)
        .sort()
    )

    for (const [id, request] of Object.entries(requests)) await conforms(id, await request())

    // Errors: no token, an id that is no ULID, an id that does not exist, a bad body.
    for (const { path, method, id } of operations()) {
      const op = document.paths[path][method]
      const secured = (op.security ?? []).length > 0
      const concrete = path.replace("{id}", MISSING)
      const body = method === "post" ? "{}" : undefined
      if (secured) await conforms(id, await fetch(`${server.base}${concrete}`, { method, ...(body ? { body } : {}) }))
      if (path.includes("{id}")) {
        await conforms(
          id,
          await call(method.toUpperCase(), path.replace("{id}", "not-a-ulid"), {
            body: method === "post" ? {} : undefined
          })
        )
        await conforms(
          id,
          await call(method.toUpperCase(), concrete, { body: method === "post" ? { decision: "deny" } : undefined })
        )
      }
      if (op.requestBody !== undefined) {
        await conforms(id, await call("POST", concrete, { headers: { "content-type": "application/json" }, body: [1] }))
      }
    }
    await conforms("journal.verify", await call("GET", "/v1/journal/verify"))
    // Operators only (403); another principal's candidate is not found (404).
    await conforms("tasks.list", await call("GET", "/v1/tasks"))
    await conforms("incidents.list", await call("GET", "/v1/incidents"))
    const other = await call("POST", `/v1/learning/candidates/${candidates[0]!.id}/accept`, { headers: BOB })
    expect(other.status).toBe(404)
    await conforms("learning.accept", other)
    await conforms("grants.revoke", await call("POST", `/v1/grants/${approvalId}/revoke`))
    await conforms("sessions.list", await call("GET", "/v1/sessions?limit=0x10"))
    // Agents: an unknown one, a malformed one, and another agent on an existing session.
    await conforms("runs.create", await call("POST", "/v1/runs", { body: { text: "hi", agent: "ghost" } }))
    await conforms("sessions.create", await call("POST", "/v1/sessions", { body: { agent: "no spaces allowed" } }))
    await conforms(
      "runs.create",
      await call("POST", "/v1/runs", { body: { text: "hi", sessionKey: "contract", agent: "other" } })
    )

    // Every documented success status was produced at least once.
    expect(checked).toEqual(
      expect.arrayContaining([
        "runs.create 202",
        "runs.create 200",
        "sessions.create 201",
        "auth.signIn 201",
        "auth.signIn 401",
        "auth.current 200",
        "auth.signOut 204"
      ])
    )
    const statuses = new Set(checked.map((c) => c.split(" ")[1]))
    expect([...statuses].sort()).toEqual(
      expect.arrayContaining(["200", "201", "202", "400", "401", "403", "404", "409"])
    )
  })
})

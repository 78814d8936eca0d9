/**
 * Agents over HTTP, on a real server over a real kernel: `POST /v1/runs` and `POST /v1/sessions`
 * take `agent`, `GET /v1/agents` lists them, the OpenAI-compatible route picks an agent by `model`,
 * and bad or conflicting agents are refused with stable codes and nothing stored.
 */
import { ScriptedModel, Tool } from "@palyra/core"
import { Effect, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, json, startServer, type TestServer } from "./fixtures.js"

const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: () => Effect.void
})
const model = ScriptedModel.make(() => ({ text: "default speaking" }), { name: "default-model" })
const terse = ScriptedModel.make(() => ({ text: "k." }), { name: "terse-model" })

let server: TestServer
beforeAll(async () => {
  server = await startServer({
    model,
    tools: [write],
    gateway: {
      agents: [{ id: "terse", description: "One word", instructions: "Be terse.", model: terse, tools: [] }]
    }
  })
})
afterAll(() => server.close())

const post = (path: string, body: unknown) =>
  fetch(`${server.base}${path}`, {
    method: "POST",
    headers: { ...ALICE, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
const get = (path: string, headers: Record<string, string> = ALICE) => fetch(`${server.base}${path}`, { headers })

describe("agents over HTTP", () => {
  it("POST /v1/runs with an agent: the run is that agent's, with its model and instructions", async () => {
    const before = terse.prompts.length
    const accepted = await post("/v1/runs", { text: "hi", sessionKey: "http-terse", agent: "terse" })
    expect(accepted.status).toBe(202)
    const { runId, sessionId } = await json(accepted)
    await server.quiet()
    expect((await json(await get(`/v1/runs/${runId}`))).state).toBe("Done")
    expect((await json(await get(`/v1/sessions/${sessionId}`))).agentId).toBe("terse")
    const tape = await json(await get(`/v1/sessions/${sessionId}/tape`))
    const request = tape.find((e: { _tag: string }) => e._tag === "ModelRequest")
    expect(request.model).toBe("terse-model")
    expect(request.routing).toMatchObject({ agent: "terse", rule: "primary", candidates: ["terse-model"], attempt: 0 })
    expect(tape.find((e: { _tag: string }) => e._tag === "AssistantMessage").text).toBe("k.")
    expect(terse.prompts.slice(before).map((p) => p.instructions)).toEqual(["Be terse."])

    // Streamed, on the same session: still the terse agent.
    const streamed = await post("/v1/runs?stream=true", { text: "again", sessionKey: "http-terse" })
    expect(streamed.headers.get("content-type")).toMatch(/text\/event-stream/)
    const text = await streamed.text()
    expect(text).toContain('"model":"terse-model"')
  })

  it("POST /v1/sessions binds a new session; another agent on it is 409, an unknown one 400, nothing stored", async () => {
    const made = await post("/v1/sessions", { sessionKey: "http-bound", agent: "terse" })
    expect(made.status).toBe(201)
    expect((await json(made)).agentId).toBe("terse")
    const plain = await json(await post("/v1/sessions", { sessionKey: "http-plain" }))
    expect(plain.agentId).toBe("default")
    await server.quiet()
    const before = await server.snapshot()

    const conflict = await post("/v1/runs", { text: "hi", sessionKey: "http-bound", agent: "default" })
    expect(conflict.status).toBe(409)
    expect((await json(conflict)).code).toBe("conflict")
    const unknown = await post("/v1/runs", { text: "hi", sessionKey: "http-new", agent: "ghost" })
    expect(unknown.status).toBe(400)
    expect(await json(unknown)).toEqual({ code: "invalid_argument", message: "unknown agent ghost" })
    const malformed = await post("/v1/sessions", { sessionKey: "http-new", agent: "not an id!" })
    expect(malformed.status).toBe(400)
    expect((await json(malformed)).code).toBe("invalid_argument")
    const conflictSession = await post("/v1/sessions", { sessionKey: "http-bound", agent: "default" })
    expect(conflictSession.status).toBe(409)
    expect(await server.snapshot()).toBe(before)
  })

  it("GET /v1/agents lists the agents with their tools and models; it needs a token", async () => {
    const response = await get("/v1/agents")
    expect(response.status).toBe(200)
    expect(await json(response)).toEqual([
      {
        id: "default",
        description: null,
        tools: ["fs.write"],
        models: ["default-model"],
        routedModels: [],
        routingThreshold: null
      },
      {
        id: "terse",
        description: "One word",
        tools: [],
        models: ["terse-model"],
        routedModels: [],
        routingThreshold: null
      }
    ])
    expect((await get("/v1/agents", {})).status).toBe(401)
  })

  it("the OpenAI-compatible route answers with the agent its model names, else the default", async () => {
    const ask = async (modelName: string) =>
      json(
        await post("/v1/chat/completions", {
          model: modelName,
          messages: [{ role: "user", content: "hello" }]
        })
      )
    const byAgent = await ask("terse")
    expect(byAgent.choices[0].message.content).toBe("k.")
    expect(byAgent.model).toBe("terse")
    const other = await ask("gpt-4o")
    expect(other.choices[0].message.content).toBe("default speaking")
  })
})

/**
 * Input an attacker sent to the previous transport, each reproduced there first (deep nesting gave
 * a 500 from a stack overflow; invalid UTF-8 was stored as U+FFFD; `/v1/runs;x`, `/v1//runs` and
 * `/v1/runs/` created runs; `?limit=1e3` and `?limit=0x10` were accepted). Every refusal here must
 * be a typed 4xx and leave the journal exactly as it was.
 */
import { request as httpRequest } from "node:http"
import { ScriptedModel } from "@palyra/core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, raw, startServer, type TestServer } from "./fixtures.js"

let server: TestServer
const MAX = 64 * 1024

beforeAll(async () => {
  server = await startServer({ model: ScriptedModel.make(() => ({ text: "hi" })), serve: { maxBodyBytes: MAX } })
})
afterAll(() => server.close())

/** Send `send`, expect each answer to be a typed refusal with `status`, and nothing stored. */
const refusedWithoutTrace = async (
  status: number,
  code: string,
  send: () => Promise<{ status: number; body: string }>
) => {
  await server.quiet()
  const before = await server.snapshot()
  const response = await send()
  expect({ status: response.status, code: JSON.parse(response.body).code }).toEqual({ status, code })
  await server.quiet()
  expect(await server.snapshot()).toBe(before)
}

const postRun = (body: Uint8Array | string, path = "/v1/runs") =>
  raw(server.port, "POST", path, { headers: ALICE, body })

describe("hostile input is refused with a typed error and leaves no trace", () => {
  it("a body nested 10,000 deep is a 400 (it was a 500 from a stack overflow)", async () => {
    const deep = `${"[".repeat(10_000)}${"]".repeat(10_000)}`
    await refusedWithoutTrace(400, "invalid_argument", () => postRun(`{"text":"x","sessionKey":${deep}}`))
    const deepObjects = `${'{"a":'.repeat(10_000)}1${"}".repeat(10_000)}`
    await refusedWithoutTrace(400, "invalid_argument", () => postRun(deepObjects))
    // Brackets inside strings are text, not nesting.
    const response = await postRun(JSON.stringify({ text: "[".repeat(10_000), sessionKey: "brackets" }))
    expect(response.status).toBe(202)
  })

  it("invalid UTF-8 inside a JSON string is a 400 (it was stored as U+FFFD)", async () => {
    for (const bad of [
      [0xff, 0xfe],
      [0xc3, 0x28],
      [0xed, 0xa0, 0x80]
    ]) {
      const body = Buffer.concat([Buffer.from('{"text":"a'), Buffer.from(bad), Buffer.from('b"}')])
      await refusedWithoutTrace(400, "invalid_argument", () => postRun(body))
    }
    // An escaped lone surrogate is well-formed JSON but not Unicode text.
    await refusedWithoutTrace(400, "invalid_argument", () => postRun('{"text":"a\\ud800b"}'))
    // Well-formed text outside the BMP goes through.
    expect((await postRun(JSON.stringify({ text: "emoji 🦀 ok", sessionKey: "utf8" }))).status).toBe(202)
  })

  it("non-canonical paths are 404 and create nothing (they created runs)", async () => {
    for (const path of [
      "/V1/RUNS",
      "/v1/Runs",
      "/v1/runs;x",
      "/v1//runs",
      "/v1/runs/",
      "//v1/runs",
      "/v1/./runs",
      "/v1/x/../runs",
      "/v1/runs%2F",
      "/v1/runs#frag",
      "http://127.0.0.1/v1/runs"
    ]) {
      await refusedWithoutTrace(404, "not_found", () => postRun(JSON.stringify({ text: "hi" }), path))
    }
    for (const path of ["/healthz/", "/HEALTHZ", "/v1/sessions;x", "/v1//sessions", "/openapi.json/"]) {
      const response = await raw(server.port, "GET", path, { headers: ALICE })
      expect({ path, status: response.status }).toEqual({ path, status: 404 })
    }
  })

  it("query integers are plain decimals in range (1e3, 0x10, %20 were accepted)", async () => {
    for (const query of [
      "limit=1e3",
      "limit=0x10",
      "limit=%20",
      "limit=",
      "limit=+5",
      "limit=05",
      "limit=1.5",
      "limit=-1",
      "limit=0",
      "limit=1001",
      "limit=99999999999999999999",
      "archived=yes",
      "archived=1"
    ]) {
      await refusedWithoutTrace(400, "invalid_argument", () =>
        raw(server.port, "GET", `/v1/sessions?${query}`, { headers: ALICE })
      )
    }
    const ok = await raw(server.port, "GET", "/v1/sessions?limit=1000&archived=false", { headers: ALICE })
    expect(ok.status).toBe(200)
    const sessions = JSON.parse(ok.body)
    const id = sessions[0].id
    for (const query of ["after=0x10", "after=%20", "after=1e3", "after=-1", "limit=5001"]) {
      const response = await raw(server.port, "GET", `/v1/sessions/${id}/tape?${query}`, { headers: ALICE })
      expect({ query, status: response.status }).toEqual({ query, status: 400 })
    }
    const resumed = await raw(server.port, "GET", `/v1/sessions/${id}/events`, {
      headers: { ...ALICE, "last-event-id": "0x1" }
    })
    expect(resumed.status).toBe(400)
  })

  it("a declared oversize body is a 413 before a byte of it is read", async () => {
    await server.quiet()
    const before = await server.snapshot()
    // Declare 10 MB, send 5 bytes and keep the request open: the answer must not wait for the rest.
    const response = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const request = httpRequest(
        {
          host: "127.0.0.1",
          port: server.port,
          method: "POST",
          path: "/v1/runs",
          headers: { ...ALICE, "content-type": "application/json", "content-length": 10_000_000 }
        },
        (res) => {
          let body = ""
          res.on("data", (chunk: Buffer) => {
            body += chunk.toString()
          })
          res.on("end", () => {
            request.destroy()
            resolve({ status: res.statusCode ?? 0, body })
          })
        }
      )
      request.on("error", reject)
      request.write('{"te')
    })
    expect(response.status).toBe(413)
    expect(JSON.parse(response.body)).toMatchObject({ code: "payload_too_large" })
    expect(await server.snapshot()).toBe(before)
  })

  it("an undeclared (chunked) body over the limit is a 413", async () => {
    await refusedWithoutTrace(413, "payload_too_large", async () => {
      const response = await fetch(`${server.base}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: new ReadableStream({
          start(controller) {
            controller.enqueue(new TextEncoder().encode(`{"text":"${"x".repeat(MAX)}"}`))
            controller.close()
          }
        }),
        duplex: "half"
      } as RequestInit)
      return { status: response.status, body: await response.text() }
    })
  })

  it("wrong types, unknown fields, huge numbers and bad ids are 400s", async () => {
    const bodies: Array<[string, string]> = [
      ["/v1/runs", '{"text":123}'],
      ["/v1/runs", '{"text":"hi","extra":true}'],
      ["/v1/runs", '{"text":"hi","sessionId":"not-a-ulid"}'],
      ["/v1/runs", '{"text":"hi","sessionKey":""}'],
      ["/v1/runs", "[]"],
      ["/v1/runs", "null"],
      ["/v1/runs", '"text"'],
      ["/v1/runs", '{"text":"hi"} trailing'],
      ["/v1/sessions", '{"title":{"a":1}}'],
      ["/v1/sessions/01KA0000000000000000000000/branch", '{"atSeq":1e400}'],
      ["/v1/sessions/01KA0000000000000000000000/branch", '{"atSeq":-1}'],
      ["/v1/sessions/01KA0000000000000000000000/branch", '{"atSeq":1.5}'],
      ["/v1/approvals/01KA0000000000000000000000", '{"decision":"approve","maxUses":1e300}'],
      ["/v1/approvals/01KA0000000000000000000000", '{"decision":"approve","expiresInSeconds":0}'],
      ["/v1/approvals/not-a-ulid", '{"decision":"approve"}']
    ]
    for (const [path, body] of bodies) {
      await refusedWithoutTrace(400, "invalid_argument", () => raw(server.port, "POST", path, { headers: ALICE, body }))
    }
    await refusedWithoutTrace(400, "invalid_argument", () =>
      raw(server.port, "POST", "/v1/runs", {
        headers: { ...ALICE, "content-type": "text/plain" },
        body: '{"text":"hi"}'
      })
    )
  })

  it("without a valid token nothing is decoded or stored: 401 first", async () => {
    for (const authorization of [undefined, "Bearer nope", "Basic YWxpY2U6eA==", "Bearer", "bearer  alice-token x"]) {
      const headers = authorization === undefined ? {} : { authorization }
      await refusedWithoutTrace(401, "unauthenticated", () =>
        raw(server.port, "POST", "/v1/runs/not-a-ulid/cancel", { headers, body: "{nope" })
      )
    }
  })
})

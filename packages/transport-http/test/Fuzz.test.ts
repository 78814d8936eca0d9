/**
 * A bounded fuzz pass against the real server: random methods, paths (real routes, ids that exist,
 * belong to someone else or are junk, mangled spellings), query strings, headers and bodies (deep
 * nesting, invalid UTF-8, huge numbers, wrong types, unknown fields, random bytes). No request may
 * get a 5xx; every refusal is a typed JSON error; and a refused request leaves the journal exactly
 * as it was.
 */
import { request as httpRequest } from "node:http"
import { ScriptedModel, Tool } from "@palyra/core"
import { Effect, Schema } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, json, startServer, type TestServer, TOKENS } from "./fixtures.js"

const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: () => Effect.void
})
const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  if (last?.role === "user" && last.text.includes("write"))
    return { toolCalls: [{ name: "fs.write", args: { path: "a" } }] }
  return { text: "ok" }
})

let server: TestServer
/** Ids that exist (alice's), to aim requests at real entities. */
const known: Array<string> = []

beforeAll(async () => {
  server = await startServer({ model, tools: [write], gateway: { requireApprovalChannel: false } })
  const post = (path: string, body: unknown) =>
    fetch(`${server.base}${path}`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify(body)
    }).then(json)
  const waiting = await post("/v1/runs", { text: "please write", sessionKey: "fuzz" })
  const done = await post("/v1/runs", { text: "hello", sessionKey: "fuzz-done" })
  await server.quiet()
  const approvals = await fetch(`${server.base}/v1/approvals?status=pending`, { headers: ALICE }).then(json)
  known.push(
    waiting.runId,
    waiting.sessionId,
    done.runId,
    done.sessionId,
    ...approvals.map((a: { id: string }) => a.id)
  )
})
afterAll(() => server.close())

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
const ulid = fc.array(fc.constantFrom(...CROCKFORD), { minLength: 26, maxLength: 26 }).map((c) => c.join(""))
const junk = fc.oneof(
  fc.string({ maxLength: 40 }).map(encodeURIComponent),
  fc.constantFrom("..", ".", "%2e%2e", "%00", "%ff", "a;b", "%2F", "01KA000000000000000000000", "null", "-1")
)
const id = fc.oneof(
  ulid,
  junk,
  fc.constant(null).map(() => known[0] ?? ""),
  fc.nat(20).map((i) => known[i % known.length] ?? "")
)

const route = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      "/v1/runs",
      "/v1/sessions",
      "/v1/approvals",
      "/v1/grants",
      "/v1/journal/verify",
      "/healthz",
      "/readyz",
      "/openapi.json",
      "/metrics",
      "/v1/chat/completions",
      "/",
      ""
    )
  },
  {
    weight: 6,
    arbitrary: fc
      .tuple(
        fc.constantFrom(
          "/v1/runs/{}",
          "/v1/runs/{}/cancel",
          "/v1/sessions/{}",
          "/v1/sessions/{}/reset",
          "/v1/sessions/{}/branch",
          "/v1/sessions/{}/tape",
          "/v1/sessions/{}/events",
          "/v1/approvals/{}",
          "/v1/grants/{}/revoke"
        ),
        id
      )
      .map(([template, value]) => template.replace("{}", value))
  },
  {
    weight: 1,
    arbitrary: fc
      .array(
        fc.oneof(
          fc.constantFrom("v1", "runs", "sessions", "V1", "", ".", ".."),
          fc.string({ maxLength: 8 }).map(encodeURIComponent)
        ),
        { maxLength: 5 }
      )
      .map((segments) => `/${segments.join("/")}`)
  }
)
const mangled = fc
  .tuple(
    route,
    fc.oneof(
      { arbitrary: fc.constant("none"), weight: 12 },
      { arbitrary: fc.constantFrom("upper", "trailing", "double", "semicolon", "dot"), weight: 3 }
    )
  )
  .map(([path, how]) => {
    switch (how) {
      case "upper":
        return path.toUpperCase()
      case "trailing":
        return `${path}/`
      case "double":
        return path.replace("/", "//")
      case "semicolon":
        return `${path};x=1`
      case "dot":
        return path.replace("/v1/", "/v1/./")
      default:
        return path
    }
  })

const queryValue = fc.oneof(
  fc.constantFrom(
    "true",
    "false",
    "0",
    "1",
    "1000",
    "1e3",
    "0x10",
    "%20",
    "-1",
    "1.5",
    "99999999999999999999",
    "",
    "pending",
    "yes"
  ),
  ulid,
  fc.string({ maxLength: 10 }).map(encodeURIComponent)
)
const query = fc
  .array(
    fc.tuple(fc.constantFrom("stream", "limit", "after", "archived", "status", "sessionId", "runId", "x"), queryValue),
    {
      maxLength: 3
    }
  )
  .map((pairs) => (pairs.length === 0 ? "" : `?${pairs.map(([k, v]) => `${k}=${v}`).join("&")}`))

const weird = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(1e308, -1e308, 2 ** 53 + 1, -0, 0.5, "", "x".repeat(3000), "\u0000", "🦀", [], {}, null, true)
)
const field = fc.constantFrom(
  "text",
  "sessionId",
  "sessionKey",
  "channel",
  "title",
  "atSeq",
  "decision",
  "scope",
  "reason",
  "expiresInSeconds",
  "maxUses",
  "model",
  "messages",
  "stream",
  "user",
  "unknown"
)
const payload = fc.dictionary(field, weird, { maxKeys: 5 })
const plausible = fc.oneof(
  fc.record(
    { text: fc.oneof(fc.string({ maxLength: 30 }), weird), sessionKey: fc.oneof(fc.string({ maxLength: 10 }), weird) },
    { requiredKeys: [] }
  ),
  fc.record(
    {
      decision: fc.constantFrom("approve", "deny", "maybe"),
      scope: fc.constantFrom("once", "session", "always", "forever"),
      maxUses: weird
    },
    { requiredKeys: ["decision"] }
  ),
  fc.record(
    {
      model: fc.constantFrom("palyra", ""),
      messages: fc.array(fc.record({ role: fc.constantFrom("user", "assistant", "tool", "robot"), content: weird })),
      stream: fc.boolean()
    },
    { requiredKeys: ["messages"] }
  )
)
const encoder = new TextEncoder()
const body: fc.Arbitrary<Uint8Array | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.oneof(payload, plausible).map((v) => encoder.encode(JSON.stringify(v))),
  fc
    .tuple(fc.integer({ min: 30, max: 20_000 }), fc.constantFrom("[", '{"a":'))
    .map(([depth, open]) =>
      encoder.encode(`{"text":${open.repeat(depth)}1${(open === "[" ? "]" : "}").repeat(depth)}}`)
    ),
  fc
    .tuple(
      fc.oneof(payload, plausible),
      fc.constantFrom([0xff, 0xfe], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0x80], [0xf8, 0x88, 0x80, 0x80, 0x80])
    )
    .map(([value, bad]) => {
      const text = JSON.stringify(value)
      const at = Math.max(1, text.indexOf('"') + 1)
      return Uint8Array.from([...encoder.encode(text.slice(0, at)), ...bad, ...encoder.encode(text.slice(at))])
    }),
  fc.uint8Array({ maxLength: 300 }),
  fc.string({ maxLength: 200 }).map((s) => encoder.encode(s))
)
const headers = fc.record(
  {
    authorization: fc.oneof(
      { arbitrary: fc.constantFrom(...TOKENS.map((t) => `Bearer ${t.token}`)), weight: 8 },
      {
        arbitrary: fc.constantFrom(
          "Bearer",
          "Bearer ",
          "Basic YWxpY2U6eA==",
          "bearer alice-token",
          "Bearer alice-token x"
        ),
        weight: 1
      },
      { arbitrary: fc.string({ maxLength: 30 }).map((s) => s.replace(/[^\x20-\x7e]/g, "")), weight: 1 }
    ),
    "content-type": fc.oneof(
      { arbitrary: fc.constant("application/json"), weight: 6 },
      {
        arbitrary: fc.constantFrom("text/plain", "application/json; charset=utf-8", "multipart/form-data", "x"),
        weight: 1
      }
    ),
    "last-event-id": queryValue.map((v) => v.replace(/%/g, "")),
    "x-palyra-session": fc.string({ maxLength: 20 }).map((s) => s.replace(/[^\x20-\x7e]/g, "")),
    "x-palyra-stateless": fc.constantFrom("true", "false", "maybe")
  },
  { requiredKeys: ["authorization", "content-type"] }
)
const requestArb = fc.record({
  method: fc.oneof(
    { arbitrary: fc.constantFrom("GET", "POST"), weight: 6 },
    { arbitrary: fc.constantFrom("PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"), weight: 1 }
  ),
  path: fc.tuple(mangled, query).map(([p, q]) => `${p.startsWith("/") ? p : `/${p}`}${q}`),
  headers,
  body
})

type FuzzRequest = typeof requestArb extends fc.Arbitrary<infer A> ? A : never

/** Send one request; an event stream is closed as soon as its status is known. */
const send = (request: FuzzRequest) =>
  new Promise<{ status: number; contentType: string; body: string }>((resolve, reject) => {
    const req = httpRequest(
      {
        host: "127.0.0.1",
        port: server.port,
        method: request.method,
        path: request.path,
        headers: {
          ...request.headers,
          ...(request.body === undefined ? {} : { "content-length": request.body.length })
        }
      },
      (res) => {
        const contentType = String(res.headers["content-type"] ?? "")
        if (contentType.startsWith("text/event-stream")) {
          res.destroy()
          resolve({ status: res.statusCode ?? 0, contentType, body: "" })
          return
        }
        const chunks: Array<Buffer> = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, contentType, body: Buffer.concat(chunks).toString() })
        )
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    if (request.body !== undefined) req.write(request.body)
    req.end()
  })

describe("fuzz (fast-check, real server)", () => {
  it("no request gets a 5xx; every refusal is a typed error and leaves the journal as it was", async () => {
    const seen = new Map<number, number>()
    let reached = 0
    await fc.assert(
      fc.asyncProperty(requestArb, async (request) => {
        await server.quiet()
        const before = await server.snapshot()
        const response = await send(request)
        seen.set(response.status, (seen.get(response.status) ?? 0) + 1)
        if (!response.body.includes("no such route")) reached++
        expect(response.status, `${request.method} ${request.path}`).toBeLessThan(500)
        if (response.status >= 400) {
          if (request.method !== "HEAD") {
            expect(response.contentType).toMatch(/^application\/json/)
            const error = JSON.parse(response.body)
            const typed =
              (typeof error.code === "string" && typeof error.message === "string") ||
              (typeof error.error?.type === "string" && typeof error.error?.message === "string")
            expect(typed, response.body).toBe(true)
          }
          await server.quiet()
          expect(await server.snapshot(), `${request.method} ${request.path} changed the journal`).toBe(before)
        }
      }),
      { numRuns: 300 }
    )
    // The pass reached the handlers, not only the router.
    expect([...seen.keys()]).toEqual(expect.arrayContaining([200, 400, 401, 404]))
    expect(reached).toBeGreaterThan(60)
  }, 120_000)
})

/**
 * Fuzzing the gRPC decoders from outside, over HTTP/2 with Node's own client: random bytes and
 * random JSON sent to every unary method, in the Connect protocol's binary and JSON encodings.
 * A client's mistake is never an internal error (not even bytes that do not decode), and a refused
 * request leaves the journal as it was.
 */
import { type ClientHttp2Session, connect } from "node:http2"
import { type Gateway, Journal, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, type Layer, ManagedRuntime, Scope } from "effect"
import * as fc from "fast-check"
import { afterAll, beforeAll, expect, it } from "vitest"
import { GrpcTransport } from "../src/index.js"

const runtime = ManagedRuntime.make(
  gatewayLayer({ model: ScriptedModel.make(() => ({ text: "ok" })) }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
let scope: Scope.CloseableScope
let client: ClientHttp2Session
const TOKEN = "fuzz-token-0123456789"

beforeAll(async () => {
  scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    GrpcTransport.serve({ port: 0, tokens: [{ token: TOKEN, principal: "fuzzer" }], maxMessageBytes: 8192 }).pipe(
      Scope.extend(scope)
    )
  )
  client = connect(url)
})
afterAll(async () => {
  client.close()
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()
})

const methods = [
  "palyra.v1.GatewayService/RouteMessage",
  "palyra.v1.GatewayService/GetRun",
  "palyra.v1.ApprovalsService/ListApprovals",
  "palyra.v1.ApprovalsService/GetApproval",
  "palyra.v1.ApprovalsService/ResolveApproval",
  "palyra.v1.SessionsService/ResolveSession",
  "palyra.v1.SessionsService/GetSession",
  "palyra.v1.SessionsService/ListSessions",
  "palyra.v1.SessionsService/ResetSession",
  "palyra.v1.SessionsService/BranchSession",
  "palyra.v1.JournalService/ReadTape",
  "palyra.v1.JournalService/Verify"
]

const call = (path: string, contentType: string, body: Uint8Array) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = client.request({
      ":method": "POST",
      ":path": `/${path}`,
      "content-type": contentType,
      authorization: `Bearer ${TOKEN}`
    })
    const chunks: Array<Buffer> = []
    let status = 0
    req.on("response", (headers) => {
      status = Number(headers[":status"])
    })
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve({ status, body: Buffer.concat(chunks).toString("utf8") }))
    req.on("error", reject)
    req.end(body)
  })

const journalSize = () =>
  runtime.runPromise(Effect.flatMap(Journal.Journal, (j) => Effect.map(j.verify, (r) => r.checked)))

const json = fc.jsonValue({ maxDepth: 4 }).map((v) => new TextEncoder().encode(JSON.stringify(v)))
const fields = fc
  .dictionary(
    fc.constantFrom("text", "runId", "sessionId", "approvalId", "target", "decision", "limit", "afterSeq", "status"),
    fc.oneof(fc.string(), fc.integer(), fc.constant(null), fc.constant({}), fc.constant([]), fc.boolean())
  )
  .map((v) => new TextEncoder().encode(JSON.stringify(v)))

it("random binary and JSON bodies on every unary method: never internal, refused ones store nothing", async () => {
  const seen = new Set<string>()
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...methods),
      fc.oneof(
        fc.record({ type: fc.constant("application/proto"), body: fc.uint8Array({ maxLength: 256 }) }),
        fc.record({
          type: fc.constant("application/json"),
          body: fc.oneof(json, fields, fc.uint8Array({ maxLength: 64 }))
        })
      ),
      async (method, { type, body }) => {
        const before = await journalSize()
        const response = await call(method, type, body)
        if (response.status !== 200) {
          const error = JSON.parse(response.body) as { code?: string; message?: string }
          seen.add(error.code ?? "?")
          // Every refusal is a client error — including bytes that do not decode as the method's
          // message (connect-es reported those as internal; patched to invalid_argument, see
          // patches/@connectrpc__connect@2.2.0.patch).
          expect(response.status, response.body).toBeLessThan(500)
          expect(error.code).not.toBe("internal")
          expect(error.code).not.toBe("unknown")
          expect(await journalSize()).toBe(before)
        }
      }
    ),
    { numRuns: 300 }
  )
  // The fuzzer reached the decoders (not just the router): malformed input was refused as such.
  expect(seen.has("invalid_argument")).toBe(true)
})

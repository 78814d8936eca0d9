/**
 * The contract from the client's side: an `HttpApiClient` derived from `Api` talks to the real
 * server (typed calls, typed errors), and the shared SSE parser reads what the server writes,
 * however the bytes are split.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Ids, ScriptedModel } from "@palyra/core"
import { Chunk, Effect, Either, Stream } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Api, Sse } from "../src/index.js"
import { startServer, type TestServer } from "./fixtures.js"

let server: TestServer

beforeAll(async () => {
  server = await startServer({ model: ScriptedModel.make(() => ({ text: "typed hello" })) })
})
afterAll(() => server.close())

const client = (token: string) =>
  HttpApiClient.make(Api.Api, {
    baseUrl: server.base,
    transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(token))
  })

const run = <A, E>(effect: Effect.Effect<A, E, HttpClient.HttpClient>) =>
  Effect.runPromise(Effect.provide(effect, FetchHttpClient.layer))

describe("an HttpApiClient derived from Api", () => {
  it("makes typed calls and gets typed errors", async () => {
    const result = await run(
      Effect.gen(function* () {
        const alice = yield* client("alice-token")
        const answer = yield* alice.runs.create({ urlParams: {}, payload: { text: "hi", sessionKey: "typed" } })
        // Without ?stream=true the answer is the accepted run, not an event stream.
        const accepted = typeof answer === "string" ? yield* Effect.die("unexpected event stream") : answer
        const session = yield* alice.sessions.get({ path: { id: accepted.sessionId } })
        const listed = yield* alice.sessions.list({ urlParams: { limit: 10 } })
        const missing = yield* Effect.either(
          alice.runs.get({ path: { id: Ids.RunId.make("01KA0000000000000000000000") } })
        )
        const bob = yield* client("bob-token")
        const peek = yield* Effect.either(bob.sessions.get({ path: { id: accepted.sessionId } }))
        const nobody = yield* client("nope")
        const refused = yield* Effect.either(nobody.grants.list())
        const health = yield* alice.health.healthz()
        return { accepted, session, listed, missing, peek, refused, health }
      })
    )
    expect(result.accepted.state).toBe("Accepted")
    expect(result.session).toMatchObject({ id: result.accepted.sessionId, principal: "alice", key: "typed" })
    expect(result.listed.map((s) => s.id)).toContain(result.accepted.sessionId)
    expect(result.health).toEqual({ status: "ok" })
    expect(Either.isLeft(result.missing) && result.missing.left).toMatchObject({ code: "not_found" })
    expect(Either.isLeft(result.peek) && result.peek.left).toMatchObject({ code: "not_found" })
    expect(Either.isLeft(result.refused) && result.refused.left).toMatchObject({ code: "unauthenticated" })
  })
})

describe("the shared SSE parser", () => {
  const events = fc.array(
    fc.record(
      {
        id: fc.stringMatching(/^[0-9]{1,6}$/),
        event: fc.stringMatching(/^[A-Za-z]{1,12}$/),
        data: fc.string({ unit: "grapheme", maxLength: 40 })
      },
      { requiredKeys: ["data"] }
    ),
    { maxLength: 8 }
  )

  it("encodes byte for byte like the plain definition (fields on one line, a data: line per line), line breaks or not", () => {
    const reference = (e: Sse.Event) => {
      let frame = ""
      if (e.id !== undefined) frame += `id: ${e.id.replace(/[\r\n]/g, "")}\n`
      if (e.event !== undefined) frame += `event: ${e.event.replace(/[\r\n]/g, "")}\n`
      for (const line of e.data.split(/\r\n|\r|\n/)) frame += `data: ${line}\n`
      return new TextEncoder().encode(`${frame}\n`)
    }
    const text = fc.oneof(
      fc.string({ unit: "grapheme", maxLength: 30 }),
      fc.constantFrom("a\r\nb", "\n", "x\ry\n", "{}")
    )
    fc.assert(
      fc.property(fc.record({ id: text, event: text, data: text }, { requiredKeys: ["data"] }), (e) => {
        expect(Buffer.from(Sse.encode(e)).equals(Buffer.from(reference(e)))).toBe(true)
      }),
      { numRuns: 300 }
    )
  })

  it("reads back what the encoder wrote, split at any byte (Promise and Effect forms)", async () => {
    await fc.assert(
      fc.asyncProperty(events, fc.array(fc.nat(), { maxLength: 6 }), async (sent, cuts) => {
        const bytes = Buffer.concat([Sse.comment("connected"), ...sent.map(Sse.encode)])
        const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)
        const bounds = [0, ...points, bytes.length]
        const chunks = bounds.slice(1).map((end, i) => bytes.subarray(bounds[i], end))
        const expected = sent.map((e) => ({ ...e, data: e.data.replace(/\r\n|\r/g, "\n") }))
        const viaPromise: Array<Sse.Event> = []
        const source = async function* () {
          yield* chunks
        }
        for await (const event of Sse.parse(source())) viaPromise.push(event)
        expect(viaPromise).toEqual(expected)
        const viaEffect = await Effect.runPromise(Stream.runCollect(Sse.decode(Stream.fromIterable(chunks))))
        expect(Chunk.toReadonlyArray(viaEffect)).toEqual(expected)
      }),
      { numRuns: 100 }
    )
  })
})

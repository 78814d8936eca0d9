/**
 * The OpenAI-compatible endpoint of a real palyrad process (demo model), driven by OpenAI's own
 * `openai` client: a streamed answer, then a second call with the same `user` that continues the
 * same session — the tape (read over the HTTP API) shows both turns, and the second model request
 * was given the first turn as history.
 */
import { Api } from "@palyra/transport-http"
import { Schema } from "effect"
import OpenAI from "openai"
import { afterAll, expect, it } from "vitest"
import { fresh, startDaemon, stopDaemons } from "./support.js"

afterAll(stopDaemons)

it("streams an answer to the openai client; the same user continues the same session", async () => {
  const d = await startDaemon(fresh("palyra-openai-"), ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
  const client = new OpenAI({ apiKey: d.token, baseURL: `${d.url}/v1`, maxRetries: 0, timeout: 30_000 })

  const stream = await client.chat.completions.create({
    model: "palyra",
    messages: [{ role: "user", content: "what time is it" }],
    stream: true,
    user: "openai-e2e"
  })
  const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
  for await (const chunk of stream) chunks.push(chunk)
  expect(chunks.length).toBeGreaterThan(1)
  expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
  expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toMatch(/time\.now returned/)
  expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop")

  const second = await client.chat.completions.create({
    model: "palyra",
    messages: [{ role: "user", content: "and now?" }],
    user: "openai-e2e"
  })
  expect(second.choices[0]?.message.role).toBe("assistant")
  expect(second.choices[0]?.message.content?.length).toBeGreaterThan(0)

  const get = async <A, I>(schema: Schema.Schema<A, I>, path: string) =>
    Schema.decodeUnknownSync(schema)(
      await (await fetch(`${d.url}${path}`, { headers: { authorization: `Bearer ${d.token}` } })).json()
    )
  const sessions = await get(Schema.Array(Api.Session), "/v1/sessions")
  const mine = sessions.filter((s) => s.key === "openai-e2e")
  expect(mine).toHaveLength(1)
  const tape = await get(Schema.Array(Api.TapeEventRecord), `/v1/sessions/${mine[0]!.id}/tape`)
  const asked = tape.flatMap((e) => (e._tag === "UserMessage" ? [e.text] : []))
  expect(asked).toEqual(["what time is it", "and now?"])
  const runs = new Set(tape.flatMap((e) => (e.runId === null ? [] : [e.runId])))
  expect(runs.size).toBe(2)
  // The second run's first model request carries the first turn (its messages and answer) as history.
  const requests = tape.flatMap((e) => (e._tag === "ModelRequest" ? [e] : []))
  const firstOfSecondRun = requests.find((r) => r.runId !== requests[0]!.runId)
  expect(firstOfSecondRun!.messages).toBeGreaterThan(requests[0]!.messages)
}, 90_000)

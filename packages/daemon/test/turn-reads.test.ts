/**
 * A plain turn on an existing keyed session reads nothing back from the tape on the main thread:
 * the run's follower is attached before its start commit (the fast route's SSE body gets the first
 * events by their publication) and the start commit is handed to the history cache (the loop's
 * first prompt is built from it). Real parts: a SQLite journal file (its `readTape` counted by a
 * wrapper), the HTTP transport's fast route on 127.0.0.1, `fetch`. And what the model is asked is
 * the same whether the history came from the cache or from a fresh read of the file (a restarted
 * kernel over the same file, its cache empty).
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type Gateway, Journal, type ModelProvider, ScriptedModel } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { gatewayLayer } from "@palyra/core/testing"
import { SqliteJournal } from "@palyra/journal"
import { HttpTransport } from "@palyra/transport-http"
import { Effect, Exit, Layer, ManagedRuntime, Scope } from "effect"
import { afterAll, describe, expect, it } from "vitest"

const dir = mkdtempSync(join(tmpdir(), "palyra-turn-reads-"))
const TOKENS = [{ token: "alice-token", principal: "alice" }]

const conversation = (prompt: ModelProvider.ModelRequest) =>
  prompt.messages.map((m) => `${m.role}:${"text" in m ? m.text : ""}`)

/** A kernel over `filename` behind the real HTTP transport, its journal's `readTape` calls counted. */
const start = async (filename: string, model: ScriptedModel.ScriptedModel) => {
  const reads = { count: 0 }
  const counted = Layer.scoped(
    Journal.Journal,
    Effect.map(SqliteJournal.make({ filename }), (journal) => ({
      ...journal,
      readTape: (sessionId, options) => {
        reads.count++
        return journal.readTape(sessionId, options)
      }
    }))
  )
  const runtime = ManagedRuntime.make(
    gatewayLayer({ model, tools: [], policy: CedarPolicy.layer(), journal: counted }) as Layer.Layer<
      Gateway.Gateway | Journal.Journal
    >
  )
  const scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    HttpTransport.serve({ port: 0, tokens: TOKENS, maxBodyBytes: 64 * 1024 }).pipe(Scope.extend(scope))
  )
  /** One turn through the fast route, read to its end: the SSE frames' event names. */
  const turn = async (text: string) => {
    const response = await fetch(`${url}/v1/runs?stream=true`, {
      method: "POST",
      headers: { authorization: "Bearer alice-token", "content-type": "application/json" },
      body: JSON.stringify({ text, sessionKey: "conv" })
    })
    expect(response.status).toBe(200)
    const body = await response.text()
    return [...body.matchAll(/^event: (.+)$/gm)].map((m) => m[1])
  }
  const close = async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  }
  return { reads, turn, close }
}

const closing: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const close of closing) await close()
})

describe("a plain turn's tape reads", () => {
  it("an existing keyed session's turn through the fast route reads the tape 0 times; the first turn of a new session too", async () => {
    const model = ScriptedModel.make((_, i) => ({ text: ["ans", "wer ", `${i}`] }))
    const kernel = await start(join(dir, "reads.db"), model)
    closing.push(kernel.close)
    const first = await kernel.turn("one")
    expect(first).toEqual([
      "RunAccepted",
      "RunStateChanged",
      "UserMessage",
      "RunStateChanged",
      "ModelRequest",
      "AssistantDelta",
      "AssistantMessage",
      "RunStateChanged"
    ])
    expect(kernel.reads.count).toBe(0)
    for (const text of ["two", "three"]) {
      const before = kernel.reads.count
      expect(await kernel.turn(text)).toEqual(first)
      expect(kernel.reads.count - before).toBe(0)
    }
    expect(model.prompts.map(conversation)[2]).toEqual([
      "user:one",
      "assistant:answer 0",
      "user:two",
      "assistant:answer 1",
      "user:three"
    ])
  })

  it("the prompt is the same from the cache as from a fresh read of the file (a restarted kernel)", async () => {
    const warmModel = ScriptedModel.make((_, i) => ({ text: `answer ${i}` }))
    const warm = await start(join(dir, "warm.db"), warmModel)
    closing.push(warm.close)
    for (const text of ["one", "two", "three"]) await warm.turn(text)

    const coldFile = join(dir, "cold.db")
    const coldModel = ScriptedModel.make((_, i) => ({ text: `answer ${i}` }))
    const before = await start(coldFile, coldModel)
    for (const text of ["one", "two"]) await before.turn(text)
    await before.close()
    // The same file, a new kernel: its history cache is empty, so the third turn reads the tape.
    const coldModel2 = ScriptedModel.make((_, i) => ({ text: `answer ${i + 2}` }))
    const cold = await start(coldFile, coldModel2)
    closing.push(cold.close)
    await cold.turn("three")
    expect(cold.reads.count).toBeGreaterThan(0)
    expect(warm.reads.count).toBe(0)

    const warmPrompt = warmModel.prompts[2]!
    const coldPrompt = coldModel2.prompts[0]!
    expect(conversation(coldPrompt)).toEqual([
      "user:one",
      "assistant:answer 0",
      "user:two",
      "assistant:answer 1",
      "user:three"
    ])
    // The whole request the model gets, not only its text.
    expect(coldPrompt).toEqual(warmPrompt)
  })
})

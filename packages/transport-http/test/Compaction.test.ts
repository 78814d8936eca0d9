/**
 * Manual compaction over HTTP with the real context engine (`@palyra/core/context`) as the kernel's
 * prompt assembler: preview, compact (a checkpoint), list checkpoints, restore — and another
 * principal gets the same 404 as for a missing session.
 */
import { ScriptedModel } from "@palyra/core"
import { ContextEngine } from "@palyra/core/context"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, json, startServer, type TestServer } from "./fixtures.js"

let server: TestServer
beforeAll(async () => {
  const model = ScriptedModel.make((request) =>
    // The compaction prompt asks for a summary; everything else gets a plain answer.
    request.instructions?.includes("summar") ? { text: "Goal: chat. Facts: turn numbers." } : { text: "noted" }
  )
  server = await startServer({
    model,
    gateway: { promptAssembler: ContextEngine.layer({ keepTurns: 2, autoCompact: false }) } as never
  })
})
afterAll(() => server.close())

const post = (path: string, body?: unknown, headers: Record<string, string> = ALICE) =>
  fetch(`${server.base}${path}`, {
    method: "POST",
    headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })

describe("compaction over HTTP", () => {
  it("preview, compact, list checkpoints, restore; not-yours is 404", async () => {
    let sessionId = ""
    for (let i = 1; i <= 6; i++) {
      const sent = await json(
        await post("/v1/runs", {
          text: `message number ${i}: ${"a long paragraph of ordinary words about the weather and the sea ".repeat(8)}`,
          sessionKey: "long"
        })
      )
      sessionId = sent.sessionId
      for (let k = 0; k < 100; k++) {
        const run = await json(await fetch(`${server.base}/v1/runs/${sent.runId}`, { headers: ALICE }))
        if (run.state === "Done") break
        await new Promise((r) => setTimeout(r, 10))
      }
    }
    const preview = await post(`/v1/sessions/${sessionId}/compact?preview=true`)
    expect(preview.status).toBe(200)
    const previewed = await json(preview)
    expect(previewed).toMatchObject({ applied: false, strategy: "session_window_v1" })
    expect(previewed.checkpointId).toBeUndefined()
    expect(await json(await fetch(`${server.base}/v1/sessions/${sessionId}/checkpoints`, { headers: ALICE }))).toEqual(
      []
    )

    const compacted = await json(await post(`/v1/sessions/${sessionId}/compact`))
    expect(compacted).toMatchObject({ applied: true, sessionId })
    expect(compacted.tokensAfter).toBeLessThan(compacted.tokensBefore)
    const checkpoints = await json(
      await fetch(`${server.base}/v1/sessions/${sessionId}/checkpoints`, { headers: ALICE })
    )
    expect(checkpoints.map((c: { id: string }) => c.id)).toEqual([compacted.checkpointId])
    const tape = await json(await fetch(`${server.base}/v1/sessions/${sessionId}/tape`, { headers: ALICE }))
    expect(tape.some((e: { _tag: string }) => e._tag === "CompactionApplied")).toBe(true)

    const bob = { authorization: "Bearer bob-token" }
    const theirs = await post(`/v1/sessions/${sessionId}/compact`, undefined, bob)
    const missing = await post("/v1/sessions/01KA0000000000000000000000/compact", undefined, bob)
    expect([theirs.status, (await json(theirs)).code]).toEqual([404, "not_found"])
    expect([missing.status, (await json(missing)).code]).toEqual([404, "not_found"])

    const restored = await post(`/v1/sessions/${sessionId}/restore`, { checkpointId: compacted.checkpointId })
    expect(restored.status).toBe(200)
    expect((await json(restored)).event).toMatchObject({
      _tag: "CheckpointRestored",
      checkpointId: compacted.checkpointId
    })
  })
})

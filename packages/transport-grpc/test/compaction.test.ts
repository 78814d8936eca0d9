import { Code, ConnectError, createClient } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { Caller, Gateway, type Journal, ScriptedModel } from "@palyra/core"
import { ContextEngine } from "@palyra/core/context"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { GrpcTransport, Proto } from "../src/index.js"
import { bearer, servedFor } from "./served.js"

// Answers every turn with a numbered fact, and writes summaries that keep nothing (so the verified
// summary falls back to the extractive one — deterministic).
const model = ScriptedModel.make((request) =>
  request.instructions?.startsWith("[palyra:compaction") === true
    ? { text: "## Goal\nsomething" }
    : { text: `Noted: order ORD-${request.messages.length} ships from dock 7.` }
)
const runtime = ManagedRuntime.make(
  gatewayLayer({
    model,
    promptAssembler: ContextEngine.layer({ contextWindow: 4_000, outputReserve: 500, autoCompact: false, keepTurns: 1 })
  }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
const ALICE = "alice-token-0123456789"
const BOB = "bob-token-0123456789"

const served = servedFor(
  runtime,
  GrpcTransport.serve({
    port: 0,
    tokens: [
      { token: ALICE, principal: "alice" },
      { token: BOB, principal: "bob" }
    ]
  })
)

const sessions = (token = ALICE) =>
  createClient(Proto.SessionsService, createGrpcTransport({ baseUrl: served.url, interceptors: [bearer(token)] }))
const journal = (token = ALICE) =>
  createClient(Proto.JournalService, createGrpcTransport({ baseUrl: served.url, interceptors: [bearer(token)] }))

/** Six finished turns in one of alice's sessions. */
const seed = () =>
  runtime.runPromise(
    Effect.gen(function* () {
      const g = yield* Gateway.Gateway
      let sessionId = ""
      for (let i = 0; i < 6; i++) {
        const { session, events } = yield* g.startRun(Caller.user("alice"), { key: "grpc-compact", text: `turn ${i}` })
        yield* Stream.runDrain(events)
        sessionId = session.id
      }
      return sessionId
    })
  )

describe("SessionsService compaction over connect-es", () => {
  it("previews, compacts, lists checkpoints and restores; another principal gets NotFound", async () => {
    const sessionId = await seed()
    const head = async () => (await journal().readTape({ sessionId, afterSeq: 0n, limit: 5000 })).events.length

    const before = await head()
    const preview = await sessions().compactSession({ sessionId, preview: true })
    expect(preview.applied).toBe(false)
    expect(preview.checkpointId).toBe("")
    expect(preview.event).toBeUndefined()
    expect(preview.summarizer).toBe("extractive")
    expect(preview.rejected).not.toBe("")
    expect(preview.summary).toContain("ORD-")
    expect(preview.tokensBefore).toBeGreaterThan(0n)
    expect(preview.tokensAfter).toBeGreaterThan(0n)
    expect(await head()).toBe(before)

    const applied = await sessions().compactSession({ sessionId })
    expect(applied.applied).toBe(true)
    expect(applied.checkpointId).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/)
    expect(applied.event?.kind.case).toBe("compactionApplied")
    expect(applied.summary).toBe(preview.summary)
    expect(applied.toSeq).toBe(preview.toSeq)
    expect(await head()).toBe(before + 1)

    const { checkpoints } = await sessions().listCheckpoints({ sessionId })
    expect(checkpoints.map((c) => c.id)).toEqual([applied.checkpointId])
    expect(checkpoints[0]).toMatchObject({
      sessionId,
      fromSeq: applied.fromSeq,
      toSeq: applied.toSeq,
      strategy: "session_window_v1",
      summarizer: "extractive",
      tokensBefore: applied.tokensBefore,
      tokensAfter: applied.tokensAfter
    })
    expect(Number(checkpoints[0]!.createdAt?.seconds ?? 0)).toBeGreaterThan(0)

    // Not yours reads like does-not-exist, for each of the three.
    for (const call of [
      () => sessions(BOB).compactSession({ sessionId, preview: true }),
      () => sessions(BOB).listCheckpoints({ sessionId }),
      () => sessions(BOB).restoreCheckpoint({ sessionId, checkpointId: applied.checkpointId })
    ]) {
      const error = await call().catch((e: unknown) => e)
      expect(error).toBeInstanceOf(ConnectError)
      expect((error as ConnectError).code).toBe(Code.NotFound)
    }
    const bad = await sessions()
      .restoreCheckpoint({ sessionId, checkpointId: "not-a-ulid" })
      .catch((e: unknown) => e)
    expect((bad as ConnectError).code).toBe(Code.InvalidArgument)

    const restored = await sessions().restoreCheckpoint({ sessionId, checkpointId: applied.checkpointId })
    expect(restored.event?.kind.case).toBe("checkpointRestored")
    if (restored.event?.kind.case === "checkpointRestored") {
      expect(restored.event.kind.value.checkpointId).toBe(applied.checkpointId)
      expect(restored.event.kind.value.by).toBe("alice")
    }
    expect(restored.session?.id).toBe(sessionId)
    expect(await head()).toBe(before + 2)
  })
})

/**
 * `palyra.v1.BackgroundService` over a real gRPC server (HTTP/2 on 127.0.0.1) and connect-es's
 * gRPC client: a finished run's reflection leaves candidates and memory, which only their owner
 * sees and decides; tasks and incidents are operators'; a daemon without the features answers
 * NOT_FOUND.
 */
import { Code, ConnectError } from "@connectrpc/connect"
import { type Gateway, type Journal, ScriptedModel } from "@palyra/core"
import { AfterRun, MemoryStore, TaskQueue } from "@palyra/core/memory"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, Layer, ManagedRuntime, Scope } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { GrpcTransport } from "../src/index.js"

const TOKENS = [
  { token: "alice-token-0123456789", principal: "alice" },
  { token: "bob-token-0123456789ab", principal: "bob" },
  { token: "operator-token-0123456789", principal: "operator", operator: true }
]
const [ALICE, BOB, OPERATOR] = TOKENS.map((t) => t.token) as [string, string, string]

const closers: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const close of closers.splice(0)) await close()
})

const serve = async (withAfterRun: boolean) => {
  const model = ScriptedModel.make(() => ({ text: "Noted." }))
  const afterRun = AfterRun.make({
    store: Effect.runSync(MemoryStore.makeMemory()),
    queue: Effect.runSync(TaskQueue.makeMemory()),
    memory: {},
    learning: { extractor: "deterministic" },
    watchdog: { mode: "observe", interval: "1 hour" },
    worker: { pollInterval: "20 millis" }
  })
  const layer = withAfterRun
    ? afterRun.layer.pipe(Layer.provideMerge(gatewayLayer(afterRun.options({ model }))))
    : gatewayLayer({ model })
  const runtime = ManagedRuntime.make(layer as Layer.Layer<Gateway.Gateway | Journal.Journal>)
  const scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    GrpcTransport.serve({ port: 0, tokens: TOKENS, maxMessageBytes: 64 * 1024 }).pipe(Scope.extend(scope))
  )
  closers.push(async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  })
  return (token: string) => GrpcTransport.makeClient({ baseUrl: url, token })
}

const code = async (p: Promise<unknown>) => {
  try {
    await p
    return undefined
  } catch (e) {
    return ConnectError.from(e).code
  }
}

const poll = async <A>(read: () => Promise<A>, until: (a: A) => boolean): Promise<A> => {
  for (let i = 0; i < 300; i++) {
    const value = await read()
    if (until(value)) return value
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error("condition not reached")
}

describe("BackgroundService", () => {
  it("candidates and memory are their owner's; tasks and incidents are operators'", async () => {
    const client = await serve(true)
    const alice = client(ALICE)
    const { runId } = await alice.gateway.routeMessage({
      target: { sessionKey: "bg" },
      text: "Remember that the staging database listens on port 5433. I usually deploy on Fridays."
    })
    const { candidates } = await poll(
      () => alice.background.listLearningCandidates({}),
      (r) => r.candidates.length === 1
    )
    const [pending] = candidates
    expect([pending!.kind, pending!.text, pending!.confidenceBps, pending!.status, pending!.sourceRunId]).toEqual([
      "preference",
      "The user usually deploy on Fridays",
      6000,
      "pending",
      runId
    ])
    // Applied by threshold: in alice's memory, not bob's.
    const { hits } = await alice.background.searchMemory({ query: "staging database" })
    expect(hits.map((h) => h.text)).toEqual(["The staging database listens on port 5433"])
    const bob = client(BOB)
    expect((await bob.background.searchMemory({ query: "staging database" })).hits).toEqual([])
    expect((await bob.background.listLearningCandidates({})).candidates).toEqual([])
    expect(await code(bob.background.decideLearningCandidate({ candidateId: pending!.id, accept: true }))).toBe(
      Code.NotFound
    )
    const decided = await alice.background.decideLearningCandidate({
      candidateId: pending!.id,
      accept: false,
      reason: "no"
    })
    expect(decided.candidate?.status).toBe("rejected")
    expect(await code(alice.background.decideLearningCandidate({ candidateId: pending!.id, accept: true }))).toBe(
      Code.FailedPrecondition
    )

    // Tasks and incidents: operators only.
    expect(await code(alice.background.listTasks({}))).toBe(Code.PermissionDenied)
    expect(await code(alice.background.listIncidents({}))).toBe(Code.PermissionDenied)
    const operator = client(OPERATOR)
    const { tasks } = await operator.background.listTasks({ state: "succeeded", kind: "memory.reflect" })
    expect(tasks.map((t) => [t.kind, JSON.parse(t.payloadJson).runId])).toEqual([["memory.reflect", runId]])
    expect(await code(alice.background.cancelTask({ taskId: tasks[0]!.id }))).toBe(Code.NotFound)
    expect(await code(operator.background.listTasks({ state: "bogus" }))).toBe(Code.InvalidArgument)
    expect((await operator.background.listIncidents({ openOnly: true })).incidents).toEqual([])
    // Operators see every principal's candidates.
    expect((await operator.background.listLearningCandidates({ status: "rejected" })).candidates).toHaveLength(1)
  })

  it("a server without the features answers NOT_FOUND", async () => {
    const client = await serve(false)
    expect(await code(client(OPERATOR).background.listTasks({}))).toBe(Code.NotFound)
    expect(await code(client(ALICE).background.searchMemory({ query: "x" }))).toBe(Code.NotFound)
  })
})

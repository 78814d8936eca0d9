import { spawnSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import * as grpc from "@grpc/grpc-js"
import * as protoLoader from "@grpc/proto-loader"
import { type Gateway, type Journal, ScriptedModel, Tool } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { GrpcTransport, HealthProto, Proto } from "../src/index.js"
import { bearer, servedFor } from "./served.js"

const here = dirname(fileURLToPath(import.meta.url))
const writes: Array<unknown> = []
const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: (args) => Effect.sync(() => writes.push(args))
})
const slow = Tool.make("slow.op", {
  description: "sleeps",
  parameters: Schema.Struct({}),
  risk: "low",
  timeout: "1 hour",
  execute: () => Effect.sleep("10 minutes")
})
const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  if (last?.role === "tool") return { text: ["Done ", "with it."] }
  if (last?.role === "user" && last.text.includes("write"))
    return { toolCalls: [{ name: "fs.write", args: { path: "a.txt" } }] }
  if (last?.role === "user" && last.text.includes("slow")) return { toolCalls: [{ name: "slow.op" }] }
  return { text: ["Hello ", "over ", "gRPC."] }
})

// A second agent, with its own model, instructions and no tools.
const terseModel = ScriptedModel.make(() => ({ text: "k." }), { name: "terse-model" })
const runtime = ManagedRuntime.make(
  gatewayLayer({
    model,
    tools: [write, slow],
    agents: [
      { id: "terse", description: "Answers in one word", instructions: "Be terse.", model: terseModel, tools: [] }
    ]
  }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
const TOKEN = "alice-token-0123456789"
const OPERATOR = "operator-token-0123456789"
const BOB = "bob-token-0123456789"

const served = servedFor(
  runtime,
  GrpcTransport.serve({
    port: 0,
    tokens: [
      { token: TOKEN, principal: "alice" },
      { token: BOB, principal: "bob" },
      { token: OPERATOR, principal: "operator", operator: true }
    ],
    maxMessageBytes: 64 * 1024
  })
)

const transport = (token = TOKEN) => createGrpcTransport({ baseUrl: served.url, interceptors: [bearer(token)] })
const gateway = (token = TOKEN) => createClient(Proto.GatewayService, transport(token))

/** A request stream the test can push to, and end. */
const requestQueue = () => {
  const items: Array<Proto.RunStreamRequest> = []
  const waiters: Array<() => void> = []
  let ended = false
  return {
    push: (r: Proto.RunStreamRequest) => {
      items.push(r)
      waiters.shift()?.()
    },
    end: () => {
      ended = true
      waiters.shift()?.()
    },
    iterable: (async function* () {
      while (true) {
        if (items.length > 0) {
          yield items.shift()!
          continue
        }
        if (ended) return
        await new Promise<void>((r) => waiters.push(r))
      }
    })()
  }
}
const req = (action: Proto.RunStreamRequest["action"]) => ({ action }) as Proto.RunStreamRequest
const events = (responses: Array<Proto.RunStreamResponse>) =>
  responses.flatMap((r) => (r.payload.case === "event" ? [r.payload.value] : []))

describe("gRPC transport with the Connect client (HTTP/2, gRPC protocol)", () => {
  it("a full run over RunStream with the tool approval resolved from a second connection", async () => {
    const q = requestQueue()
    q.push(req({ case: "start", value: { target: { sessionKey: "grpc" }, text: "please write" } as never }))
    q.end()
    const approvals = createClient(Proto.ApprovalsService, transport())
    const got: Array<Proto.RunStreamResponse> = []
    for await (const r of gateway().runStream(q.iterable)) {
      got.push(r)
      if (r.payload.case === "event" && r.payload.value.kind.case === "approvalRequested") {
        const resolved = await approvals.resolveApproval({
          decision: { approvalId: r.payload.value.kind.value.approvalId, approve: true }
        })
        expect(resolved.approval?.status).toBe(Proto.ApprovalStatus.APPROVED)
      }
    }
    expect(got[0]?.payload.case).toBe("sessionId")
    const evs = events(got)
    expect(evs.map((e) => e.kind.case)).toContain("toolResult")
    const last = evs.at(-1)!
    expect(last.kind.case === "runStateChanged" && last.kind.value.to).toBe(Proto.RunState.DONE)
    const seqs = evs.map((e) => Number(e.tapeSeq))
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i))
    expect(writes).toContainEqual({ path: "a.txt" })
  })

  it("resumes after a disconnect from a seq: exactly the missing events, then live", async () => {
    const g = gateway()
    const sent = await g.routeMessage({ target: { sessionKey: "resume" }, text: "hello" })
    for (let i = 0; i < 100; i++) {
      const run = await g.getRun({ runId: sent.runId })
      if (run.run?.state === Proto.RunState.DONE) break
      await new Promise((r) => setTimeout(r, 20))
    }
    const journal = createClient(Proto.JournalService, transport())
    const tape = await journal.readTape({ sessionId: sent.sessionId })
    const from = 3n
    const q = requestQueue()
    q.push(req({ case: "resume", value: { sessionId: sent.sessionId, afterSeq: from } as never }))
    q.push(req({ case: "message", value: "hello again" }))
    q.end()
    const got = events(await collect(g.runStream(q.iterable)))
    const replayed = got.filter((e) => e.tapeSeq <= tape.events.at(-1)!.tapeSeq)
    expect(replayed.map((e) => e.tapeSeq)).toEqual(tape.events.filter((e) => e.tapeSeq > from).map((e) => e.tapeSeq))
    expect(replayed).toEqual(tape.events.filter((e) => e.tapeSeq > from))
    // …then the live events of the new message, gap-free after the replay.
    const seqs = got.map((e) => Number(e.tapeSeq))
    expect(seqs).toEqual(seqs.map((_, i) => Number(from) + 1 + i))
    const last = got.at(-1)!
    expect(last.kind.case === "runStateChanged" && last.kind.value.to).toBe(Proto.RunState.DONE)
  })

  it("cancels a run from the stream", async () => {
    const q = requestQueue()
    q.push(req({ case: "start", value: { target: { sessionKey: "cancel" }, text: "something slow" } as never }))
    const got: Array<Proto.TapeEvent> = []
    for await (const r of gateway().runStream(q.iterable)) {
      if (r.payload.case !== "event") continue
      got.push(r.payload.value)
      const e = r.payload.value
      if (e.kind.case === "toolStarted") {
        q.push(req({ case: "cancel", value: { runId: e.runId } as never }))
        q.end()
      }
    }
    const last = got.at(-1)!
    expect(last.kind.case === "runStateChanged" && last.kind.value.to).toBe(Proto.RunState.CANCELLED)
  })

  it("the typed client helper drives the daemon with a token", async () => {
    const palyra = GrpcTransport.makeClient({ baseUrl: served.url, token: TOKEN })
    const sent = await palyra.gateway.routeMessage({ target: { sessionKey: "helper" }, text: "hi" })
    const session = await palyra.sessions.getSession({ sessionId: sent.sessionId })
    expect(session.session?.key).toBe("helper")
  })

  it("refuses missing and wrong tokens; health needs none", async () => {
    const health = createClient(HealthProto.Health, createGrpcTransport({ baseUrl: served.url }))
    expect((await health.check({})).status).toBe(HealthProto.HealthCheckResponse_ServingStatus.SERVING)
    const none = createClient(Proto.SessionsService, createGrpcTransport({ baseUrl: served.url }))
    await expect(none.listSessions({})).rejects.toMatchObject({ code: Code.Unauthenticated })
    const wrong = createClient(Proto.SessionsService, transport("wrong-token-wrong-token"))
    await expect(wrong.listSessions({})).rejects.toMatchObject({ code: Code.Unauthenticated })
  })

  it("malformed and oversized requests are refused with the right code and nothing is stored", async () => {
    const sessions = createClient(Proto.SessionsService, transport())
    const before = (await sessions.listSessions({})).sessions.length
    const g = gateway()
    await expect(g.getRun({ runId: "nope" })).rejects.toMatchObject({ code: Code.InvalidArgument })
    await expect(g.getRun({ runId: "01KA0000000000000000000000" })).rejects.toMatchObject({ code: Code.NotFound })
    await expect(g.routeMessage({ target: { sessionKey: "x" }, text: "" })).rejects.toMatchObject({
      code: Code.InvalidArgument
    })
    await expect(g.routeMessage({ target: { sessionKey: "big" }, text: "x".repeat(100_000) })).rejects.toMatchObject({
      code: Code.ResourceExhausted
    })
    const q = requestQueue()
    q.push(req({ case: "message", value: "not first" }))
    q.end()
    await expect(collect(g.runStream(q.iterable))).rejects.toBeInstanceOf(ConnectError)
    const verify = createClient(Proto.JournalService, transport())
    await expect(verify.verify({})).rejects.toMatchObject({ code: Code.PermissionDenied })
    expect((await createClient(Proto.JournalService, transport(OPERATOR)).verify({})).ok).toBe(true)
    expect((await sessions.listSessions({})).sessions.length).toBe(before)
  })

  it("200 concurrent RunStreams complete with gap-free tapes", async () => {
    const g = gateway()
    const results = await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const q = requestQueue()
        q.push(req({ case: "start", value: { target: { sessionKey: `many-${i}` }, text: "hi" } as never }))
        q.end()
        return events(await collect(g.runStream(q.iterable)))
      })
    )
    for (const evs of results) {
      const seqs = evs.map((e) => Number(e.tapeSeq))
      expect(seqs).toEqual(seqs.map((_, i) => i + 1))
      const last = evs.at(-1)!
      expect(last.kind.case === "runStateChanged" && last.kind.value.to).toBe(Proto.RunState.DONE)
    }
  }, 60_000)
})

describe("agents over gRPC", () => {
  const untilDone = async (runId: string) => {
    for (let i = 0; i < 200; i++) {
      if ((await gateway().getRun({ runId })).run?.state === Proto.RunState.DONE) return
      await new Promise((r) => setTimeout(r, 20))
    }
    throw new Error(`run ${runId} did not finish`)
  }
  const codeOf = (p: Promise<unknown>) =>
    p.then(
      () => "ok",
      (e: unknown) => Code[ConnectError.from(e).code]
    )

  it("RouteMessage and RunStream start runs for a named agent, which the tape's routing names", async () => {
    const prompts = terseModel.prompts.length
    const g = gateway()
    const sent = await g.routeMessage({ target: { sessionKey: "agent-route", agent: "terse" }, text: "hi" })
    await untilDone(sent.runId)
    const session = await createClient(Proto.SessionsService, transport()).getSession({ sessionId: sent.sessionId })
    expect(session.session?.agentId).toBe("terse")
    const tape = await createClient(Proto.JournalService, transport()).readTape({ sessionId: sent.sessionId })
    const request = tape.events.find((e) => e.kind.case === "modelRequest")?.kind.value as Proto.ModelRequest
    expect(request.model).toBe("terse-model")
    expect(request.tools).toEqual([])
    expect(request.routing).toMatchObject({ agent: "terse", rule: "primary", candidates: ["terse-model"], attempt: 0 })
    expect(request.routing?.thresholdTokens).toBeUndefined()

    const q = requestQueue()
    q.push(
      req({ case: "start", value: { target: { sessionKey: "agent-stream", agent: "terse" }, text: "yo" } as never })
    )
    q.end()
    const evs = events(await collect(g.runStream(q.iterable)))
    const streamed = evs.find((e) => e.kind.case === "modelRequest")?.kind.value as Proto.ModelRequest
    expect(streamed.routing?.agent).toBe("terse")
    const answer = evs.find((e) => e.kind.case === "assistantMessage")?.kind.value as Proto.AssistantMessage
    expect(answer.text).toBe("k.")
    expect(terseModel.prompts.slice(prompts).map((p) => p.instructions)).toEqual(["Be terse.", "Be terse."])
  })

  it("an unknown agent is INVALID_ARGUMENT; another agent on an existing session is FAILED_PRECONDITION", async () => {
    const g = gateway()
    expect(await codeOf(g.routeMessage({ target: { sessionKey: "ghostly", agent: "ghost" }, text: "hi" }))).toBe(
      "InvalidArgument"
    )
    const q = requestQueue()
    q.push(req({ case: "start", value: { target: { agent: "ghost" }, text: "hi" } as never }))
    q.end()
    expect(await codeOf(collect(g.runStream(q.iterable)))).toBe("InvalidArgument")
    const sessions = createClient(Proto.SessionsService, transport())
    const made = await sessions.resolveSession({ target: { sessionKey: "agent-fixed", agent: "terse" } })
    expect(made.session?.agentId).toBe("terse")
    expect(await codeOf(sessions.resolveSession({ target: { sessionKey: "agent-fixed", agent: "default" } }))).toBe(
      "FailedPrecondition"
    )
    expect((await sessions.resolveSession({ target: { sessionKey: "agent-fixed" } })).session?.agentId).toBe("terse")
  })

  it("ListAgents lists every agent with its tools and models", async () => {
    const { agents } = await createClient(Proto.AgentsService, transport(BOB)).listAgents({})
    expect(agents.map((a) => [a.id, a.description, a.tools, a.models])).toEqual([
      ["default", "", ["fs.write", "slow.op"], ["scripted"]],
      ["terse", "Answers in one word", [], ["terse-model"]]
    ])
    await expect(
      createClient(Proto.AgentsService, createGrpcTransport({ baseUrl: served.url })).listAgents({})
    ).rejects.toMatchObject({ code: Code.Unauthenticated })
  })
})

describe("an independent client: @grpc/grpc-js + @grpc/proto-loader on the .proto files", () => {
  const definition = protoLoader.loadSync(join(here, "..", "proto", "palyra", "v1", "gateway.proto"), {
    includeDirs: [join(here, "..", "proto")],
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true
  })
  // biome-ignore lint/suspicious/noExplicitAny: the dynamically loaded package has no static types
  const palyra = (grpc.loadPackageDefinition(definition) as any).palyra.v1
  const metadata = (token = TOKEN) => {
    const m = new grpc.Metadata()
    m.set("authorization", `Bearer ${token}`)
    return m
  }

  it("runs a full RunStream with an approval, and gets UNAUTHENTICATED without a token", async () => {
    const address = served.url.replace("http://", "")
    const client = new palyra.GatewayService(address, grpc.credentials.createInsecure())
    const approvals = new palyra.ApprovalsService(address, grpc.credentials.createInsecure())
    const received: Array<{ event?: { tapeSeq: number; kind: string; [k: string]: unknown } }> = []
    await new Promise<void>((resolve, reject) => {
      const call = client.runStream(metadata())
      call.on("data", (r: (typeof received)[number]) => {
        received.push(r)
        const e = r.event as { kind?: string; approvalRequested?: { approvalId: string } } | undefined
        if (e?.kind === "approvalRequested") {
          approvals.resolveApproval(
            { decision: { approvalId: e.approvalRequested!.approvalId, approve: true, scope: "APPROVAL_SCOPE_ONCE" } },
            metadata(),
            (err: Error | null) => (err ? reject(err) : undefined)
          )
        }
      })
      call.on("error", reject)
      call.on("end", () => resolve())
      call.write({ start: { target: { sessionKey: "grpc-js" }, text: "write with grpc-js" } })
      call.end()
    })
    const evs = received.filter((r) => r.event).map((r) => r.event!)
    expect(evs.map((e) => e.kind)).toContain("toolResult")
    expect(evs.at(-1)).toMatchObject({ kind: "runStateChanged", runStateChanged: { to: "RUN_STATE_DONE" } })
    const seqs = evs.map((e) => e.tapeSeq)
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i))

    const sessions = new palyra.SessionsService(address, grpc.credentials.createInsecure())
    const error = await new Promise<grpc.ServiceError>((resolve) =>
      sessions.listSessions({}, new grpc.Metadata(), (err: grpc.ServiceError) => resolve(err))
    )
    expect(error.code).toBe(grpc.status.UNAUTHENTICATED)
    client.close()
    approvals.close()
    sessions.close()
  })
})

describe("generated code", () => {
  it("is current: buf generate from the .proto files reproduces src/gen exactly", () => {
    const out = mkdtempSync(join(tmpdir(), "palyra-gen-"))
    const root = join(here, "..")
    const result = spawnSync("buf", ["generate", "--output", out], { cwd: root, encoding: "utf8" })
    expect(result.status, result.stderr).toBe(0)
    const files = (dir: string): Array<string> =>
      readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
        d.isDirectory() ? files(join(dir, d.name)).map((f) => `${d.name}/${f}`) : [d.name]
      )
    const committed = files(join(root, "src", "gen")).sort()
    expect(files(join(out, "src", "gen")).sort()).toEqual(committed)
    for (const f of committed) {
      expect(readFileSync(join(out, "src", "gen", f), "utf8"), f).toBe(
        readFileSync(join(root, "src", "gen", f), "utf8")
      )
    }
  })
})

async function collect<A>(iterable: AsyncIterable<A>): Promise<Array<A>> {
  const out: Array<A> = []
  for await (const x of iterable) out.push(x)
  return out
}

describe("gRPC authorization is the Gateway's", () => {
  it("principal B cannot touch A's run, session, approval or tape through any RunStream message or unary call", async () => {
    const alice = requestQueue()
    alice.push(req({ case: "start", value: { target: { sessionKey: "isolated" }, text: "please write" } as never }))
    const stream = gateway().runStream(alice.iterable)[Symbol.asyncIterator]()
    let ids: { runId: string; sessionId: string; approvalId: string } | undefined
    while (ids === undefined) {
      const next = await stream.next()
      if (next.done) throw new Error("alice's stream ended early")
      const r = next.value
      if (r.payload.case === "event" && r.payload.value.kind.case === "approvalRequested") {
        ids = {
          runId: r.payload.value.runId,
          sessionId: r.payload.value.sessionId,
          approvalId: r.payload.value.kind.value.approvalId
        }
      }
    }
    const { runId, sessionId, approvalId } = ids
    const missing = "01KA0000000000000000000000"
    const codeOf = (p: Promise<unknown>) =>
      p.then(
        () => "ok",
        (e: unknown) => Code[ConnectError.from(e).code]
      )
    /** Bob's RunStream: the given first message, then `then` (if any); how it ended. */
    const bobStream = async (first: Proto.RunStreamRequest["action"], then?: Proto.RunStreamRequest["action"]) => {
      const q = requestQueue()
      q.push(req(first))
      if (then) q.push(req(then))
      q.end()
      return codeOf(collect(gateway(BOB).runStream(q.iterable)))
    }
    const own = { case: "start", value: { target: { sessionKey: "bobs" }, text: "hello" } } as never
    const results: Record<string, string> = {
      "stream: cancel A's run": await bobStream(own, { case: "cancel", value: { runId } } as never),
      "stream: approve A's approval": await bobStream(own, {
        case: "approval",
        value: { approvalId, approve: true }
      } as never),
      "stream: resume A's session": await bobStream({ case: "resume", value: { sessionId, afterSeq: 0n } } as never),
      "stream: start in A's session": await bobStream({
        case: "start",
        value: { target: { sessionId }, text: "hi" }
      } as never),
      "stream: cancel a missing run": await bobStream(own, { case: "cancel", value: { runId: missing } } as never)
    }
    const g = gateway(BOB)
    const approvals = createClient(Proto.ApprovalsService, transport(BOB))
    const sessions = createClient(Proto.SessionsService, transport(BOB))
    const journal = createClient(Proto.JournalService, transport(BOB))
    Object.assign(results, {
      getRun: await codeOf(g.getRun({ runId })),
      routeMessage: await codeOf(g.routeMessage({ target: { sessionId }, text: "hi" })),
      getApproval: await codeOf(approvals.getApproval({ approvalId })),
      resolveApproval: await codeOf(approvals.resolveApproval({ decision: { approvalId, approve: true } })),
      getSession: await codeOf(sessions.getSession({ sessionId })),
      resolveSession: await codeOf(sessions.resolveSession({ target: { sessionId } })),
      resetSession: await codeOf(sessions.resetSession({ sessionId })),
      branchSession: await codeOf(sessions.branchSession({ sessionId })),
      readTape: await codeOf(journal.readTape({ sessionId })),
      "getRun (missing)": await codeOf(g.getRun({ runId: missing })),
      "readTape (missing)": await codeOf(journal.readTape({ sessionId: missing }))
    })
    expect(results).toEqual(Object.fromEntries(Object.keys(results).map((k) => [k, "NotFound"])))
    expect((await approvals.listApprovals({})).approvals).toEqual([])
    // A's run is untouched and still waiting; A denies it and the stream completes.
    expect((await gateway().getRun({ runId })).run?.state).toBe(Proto.RunState.WAITING_FOR_APPROVAL)
    alice.push(req({ case: "approval", value: { approvalId, approve: false } } as never))
    alice.end()
    for (let next = await stream.next(); !next.done; next = await stream.next()) {
      // drain to the end of the run
    }
    expect((await gateway().getRun({ runId })).run?.state).toBe(Proto.RunState.DONE)
  })
})

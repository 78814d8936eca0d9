import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Scope, Stream } from "effect"
import { Caller, ScriptedModel } from "../src/index.js"
import { pendingApproval, recordingTool, withGateway } from "./helpers.js"

const alice = Caller.user("alice")
const bob = Caller.user("bob")
const op = Caller.operator("op")

/** Every run asks for the sensitive tool once, then answers. */
const model = () =>
  ScriptedModel.make((request) =>
    request.messages.at(-1)?.role === "tool" ? { text: "done" } : { toolCalls: [{ name: "fs.write", args: { x: 1 } }] }
  )

describe("registerApprover(caller, sessionId): an approval channel for one session only", () => {
  it.effect("narrowed to a session: other sessions of the same principal, and other principals, fail closed", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      yield* withGateway({ model: model(), tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const chat = yield* gateway.resolveSession(alice, { key: "chat" })
          const other = yield* gateway.resolveSession(alice, { key: "cli" })
          const bobs = yield* gateway.resolveSession(bob, { key: "chat" })
          const scope = yield* Scope.make()
          yield* Scope.extend(gateway.registerApprover(alice, chat.id), scope)
          // bob cannot make himself an approval channel for alice's session: nothing is registered
          yield* Scope.extend(gateway.registerApprover(bob, other.id), scope)

          // alice's other session: nobody can answer there, so the call is denied at once
          const elsewhere = yield* gateway.sendMessage(alice, { sessionId: other.id, text: "write" })
          assert.strictEqual((yield* gateway.awaitRun(op, elsewhere.run.id)).state, "Done")
          const tape = yield* gateway.readTape(op, other.id, { afterSeq: 0 })
          assert.isTrue(tape.some((e) => e._tag === "ToolResult" && /no approval channel/.test(e.output)))
          // bob's session is not alice's chat's either
          const bobRun = yield* gateway.sendMessage(bob, { sessionId: bobs.id, text: "write" })
          assert.strictEqual((yield* gateway.awaitRun(op, bobRun.run.id)).state, "Done")
          assert.deepStrictEqual(calls, [])

          // the registered session: the run waits for the approval, which alice answers
          const here = yield* gateway.sendMessage(alice, { sessionId: chat.id, text: "write" })
          const pending = yield* pendingApproval(gateway, here.run.id)
          assert.strictEqual(pending.sessionId, chat.id)
          assert.strictEqual((yield* gateway.getRun(op, here.run.id)).state, "WaitingForApproval")
          yield* gateway.resolveApproval(alice, { approvalId: pending.id, decision: "approve" })
          assert.strictEqual((yield* gateway.awaitRun(op, here.run.id)).state, "Done")
          assert.deepStrictEqual(calls, [{ x: 1 }])

          // once the registration's scope closes, the session fails closed again
          yield* Scope.close(scope, Exit.void)
          const after = yield* gateway.sendMessage(alice, { sessionId: chat.id, text: "write" })
          assert.strictEqual((yield* gateway.awaitRun(op, after.run.id)).state, "Done")
          assert.deepStrictEqual(calls, [{ x: 1 }])
        })
      )
    })
  )

  it.effect("without a session: every session of the principal counts (a console), others' do not", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("fs.write", "sensitive")
      yield* withGateway({ model: model(), tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          yield* gateway.registerApprover(alice)
          const a = yield* gateway.sendMessage(alice, { key: "any", text: "write" })
          yield* pendingApproval(gateway, a.run.id)
          const b = yield* gateway.sendMessage(bob, { key: "any", text: "write" })
          assert.strictEqual((yield* gateway.awaitRun(op, b.run.id)).state, "Done")
        }).pipe(Effect.scoped)
      )
    })
  )

  it.effect("subscribeApprovalChanges: subscribed and registered when it returns, before the stream is pulled", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      yield* withGateway({ model: model(), tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const changes = yield* gateway.subscribeApprovalChanges(alice)
          // nothing has pulled `changes` yet: alice already counts as an approval channel, so the
          // run waits instead of failing closed, and the request is buffered for her
          const started = yield* gateway.sendMessage(alice, { key: "inbox", text: "write" })
          const pending = yield* pendingApproval(gateway, started.run.id)
          yield* gateway.resolveApproval(alice, { approvalId: pending.id, decision: "approve" })
          assert.strictEqual((yield* gateway.awaitRun(op, started.run.id)).state, "Done")
          const seen = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.take(changes, 2)))
          assert.deepStrictEqual(
            seen.map((record) => [record.id, record.status]),
            [
              [pending.id, "pending"],
              [pending.id, "approved"]
            ]
          )
          assert.deepStrictEqual(calls, [{ x: 1 }])
          // another principal's subscription sees only its own approvals: alice's next request is
          // published before bob's, and the first thing bob sees is his
          const bobs = yield* gateway.subscribeApprovalChanges(bob)
          const hers = yield* gateway.sendMessage(alice, { key: "inbox", text: "write" })
          yield* pendingApproval(gateway, hers.run.id)
          const his = yield* gateway.sendMessage(bob, { key: "inbox", text: "write" })
          const bobsPending = yield* pendingApproval(gateway, his.run.id)
          const first = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.take(bobs, 1)))
          assert.deepStrictEqual(
            first.map((record) => record.id),
            [bobsPending.id]
          )
        }).pipe(Effect.scoped)
      )
    })
  )
})

import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Schedule, TestClock } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import { Caller, PolicyEngine, ScriptedModel, type TapeEvent } from "../src/index.js"
import { collect } from "../src/testing.js"
import { pendingApproval, recordingTool, withGateway } from "./helpers.js"

const request = (
  tool: string,
  risk: "low" | "sensitive" | "critical",
  extra: Partial<PolicyEngine.PolicyRequest> = {}
) => ({
  principal: "alice",
  sessionId: "01KA0000000000000000000SES" as never,
  channel: null,
  tool: { name: tool, risk, category: "test" },
  args: {},
  argsDigest: "d",
  ...extra
})

describe("Cedar policy engine", () => {
  it.effect("the default set: low allowed, sensitive needs approval, critical denied, each naming its policy", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make()
      const low = yield* engine.decide(request("time.now", "low"))
      assert.deepStrictEqual(low, {
        decision: "allow",
        policyIds: ["default.low-risk-allowed"],
        reasons: ["low-risk tools are allowed"]
      })
      const sensitive = yield* engine.decide(request("fs.write", "sensitive"))
      assert.strictEqual(sensitive.decision, "require_approval")
      assert.deepStrictEqual(sensitive.policyIds, ["default.sensitive-needs-approval"])
      const critical = yield* engine.decide(request("disk.wipe", "critical"))
      assert.strictEqual(critical.decision, "deny")
      assert.deepStrictEqual(critical.policyIds, ["default.critical-denied"])
    })
  )

  it.effect("deny by default: with no permitting policy nothing runs", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make({ policies: "" })
      const d = yield* engine.decide(request("time.now", "low"))
      assert.strictEqual(d.decision, "deny")
      assert.deepStrictEqual(d.policyIds, [])
      assert.match(d.reasons[0]!, /deny by default/)
    })
  )

  it.effect("a forbid beats a permit; principals and categories can be targeted", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make({
        policies: `${CedarPolicy.defaultPolicies}
@id("ops.shell-for-bob")
permit (principal == Palyra::Principal::"bob", action == Palyra::Action::"tool.execute", resource == Palyra::Tool::"shell.exec");
@id("ops.no-network-for-interns")
@reason("interns may not use the network")
forbid (principal == Palyra::Principal::"intern", action, resource is Palyra::Tool) when { resource.category == "network" };`
      })
      const bob = yield* engine.decide(request("shell.exec", "sensitive", { principal: "bob" }))
      assert.deepStrictEqual([bob.decision, bob.policyIds], ["allow", ["ops.shell-for-bob"]])
      const alice = yield* engine.decide(request("shell.exec", "sensitive"))
      assert.strictEqual(alice.decision, "require_approval")
      const intern = yield* engine.decide({
        ...request("http.fetch", "low", { principal: "intern" }),
        tool: { name: "http.fetch", risk: "low", category: "network" }
      })
      assert.deepStrictEqual(
        [intern.decision, intern.policyIds, intern.reasons],
        ["deny", ["ops.no-network-for-interns"], ["interns may not use the network"]]
      )
    })
  )

  it.effect("a bad policy text is rejected with Cedar's diagnostics; the old set stays in force", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make()
      const before = yield* engine.version
      const syntax = yield* Effect.flip(engine.reload("permit (principal, action, resource) when { ;"))
      assert.strictEqual(syntax._tag, "InvalidArgument")
      assert.match(syntax.message, /policy set rejected/)
      const invalid = yield* Effect.flip(
        engine.reload(`permit (principal, action, resource is Palyra::Tool) when { resource.colour == "red" };`)
      )
      assert.match(invalid.message, /colour/)
      assert.strictEqual(yield* engine.version, before)
      assert.strictEqual((yield* engine.decide(request("time.now", "low"))).decision, "allow")
      const start = yield* Effect.flip(CedarPolicy.make({ policies: "forbid (" }))
      assert.strictEqual(start._tag, "InvalidArgument")
    })
  )

  it.live("hot reload from a folder: a good file applies, a bad file keeps the old set", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "palyra-policies-"))
      writeFileSync(join(dir, "base.cedar"), CedarPolicy.defaultPolicies)
      const engine = yield* CedarPolicy.make({ policies: yield* CedarPolicy.readPolicyDirectory(dir) })
      const results: Array<boolean> = []
      yield* CedarPolicy.watchDirectory(engine, dir, (r) => results.push(r.ok))
      writeFileSync(join(dir, "base.cedar"), "") // deny everything
      yield* Effect.sync(() => results.length).pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (n) => n >= 1 }),
        Effect.timeout("5 seconds")
      )
      assert.strictEqual((yield* engine.decide(request("time.now", "low"))).decision, "deny")
      writeFileSync(join(dir, "broken.cedar"), "permit (")
      yield* Effect.sync(() => results.length).pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (n) => n >= 2 }),
        Effect.timeout("5 seconds")
      )
      assert.strictEqual(results.at(-1), false)
      assert.strictEqual((yield* engine.decide(request("time.now", "low"))).decision, "deny")
    }).pipe(Effect.scoped)
  )

  it.effect("decisions are cached exactly and never stale after a reload", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make()
      assert.strictEqual((yield* engine.decide(request("time.now", "low"))).decision, "allow")
      assert.strictEqual((yield* engine.decide(request("time.now", "low"))).decision, "allow")
      yield* engine.reload(`forbid (principal, action, resource);`)
      assert.strictEqual((yield* engine.decide(request("time.now", "low"))).decision, "deny")
    })
  )
})

describe("Cedar in the agent loop, with narrow grants", () => {
  it.effect(
    "every decision is on the tape with Cedar policy ids; an always-grant covers only the exact arguments",
    () =>
      Effect.gen(function* () {
        const { tool: shell, calls } = recordingTool("shell.exec", "sensitive")
        const model = ScriptedModel.make([
          { toolCalls: [{ name: "shell.exec", args: { x: 1 } }] },
          { toolCalls: [{ name: "shell.exec", args: { x: 1 } }] },
          { toolCalls: [{ name: "shell.exec", args: { x: 2 } }] },
          { text: "done" }
        ])
        const policy = Layer.effect(PolicyEngine.PolicyEngine, CedarPolicy.make())
        yield* withGateway({ model, tools: [shell], policy: policy as never }, (gateway) =>
          Effect.gen(function* () {
            const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "run things" })
            const fiber = yield* Effect.fork(collect(events))
            const pending = () => pendingApproval(gateway, run.id)
            const first = yield* pending()
            const grant = yield* gateway.resolveApproval(Caller.operator("bob"), {
              approvalId: first.id,
              decision: "approve",
              scope: "always"
            })
            const third = yield* pending()
            yield* gateway.resolveApproval(Caller.operator("bob"), { approvalId: third.id, decision: "deny" })
            const seen = yield* Fiber.join(fiber)
            const decided = seen.filter((e): e is TapeEvent.TapeEventOf<"PolicyDecided"> => e._tag === "PolicyDecided")
            assert.deepStrictEqual(
              decided.map((d) => [d.decision, d.policyIds]),
              [
                ["require_approval", ["default.sensitive-needs-approval"]],
                ["allow", [`grant:${grant.id}`]],
                ["require_approval", ["default.sensitive-needs-approval"]]
              ]
            )
            assert.deepStrictEqual(calls, [{ x: 1 }, { x: 1 }])
            assert.match(CedarPolicy.grantPolicy(grant), /permit \(\s*principal == Palyra::Principal::"alice"/)
            assert.match(CedarPolicy.grantPolicy(grant), /context\.argsDigest == "/)
          })
        )
      })
  )
})

describe("standing grants: limits, expiry, revocation, all on the tape", () => {
  it.effect("a grant limited to one use covers one call; revoking stops it at once; both are on the tape", () =>
    Effect.gen(function* () {
      const { tool: shell, calls } = recordingTool("shell.exec", "sensitive")
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "shell.exec", args: { x: 1 } }] },
        { toolCalls: [{ name: "shell.exec", args: { x: 1 } }] },
        { toolCalls: [{ name: "shell.exec", args: { x: 1 } }] },
        { text: "done" }
      ])
      const policy = Layer.effect(PolicyEngine.PolicyEngine, CedarPolicy.make())
      yield* withGateway({ model, tools: [shell], policy: policy as never }, (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "run things" })
          const fiber = yield* Effect.fork(collect(events))
          const pending = () => pendingApproval(gateway, run.id)
          const first = yield* pending()
          const grant = yield* gateway.resolveApproval(Caller.operator("bob"), {
            approvalId: first.id,
            decision: "approve",
            scope: "always",
            grantMaxUses: 1
          })
          // Call 2 uses the grant (and uses it up); call 3 needs a human again.
          const third = yield* pending()
          assert.notStrictEqual(third.id, first.id)
          yield* gateway.resolveApproval(Caller.operator("bob"), {
            approvalId: third.id,
            decision: "approve",
            scope: "always"
          })
          const seen = yield* Fiber.join(fiber)
          const changes = seen.filter((e): e is TapeEvent.TapeEventOf<"GrantChanged"> => e._tag === "GrantChanged")
          assert.deepStrictEqual(
            changes.map((c) => [c.approvalId === grant.id ? "first" : "second", c.change, c.uses]),
            [
              ["first", "granted", 0],
              ["first", "used", 1],
              ["first", "exhausted", 1],
              ["second", "granted", 0]
            ]
          )
          assert.strictEqual(calls.length, 3)
          const grants = yield* gateway.listGrants(Caller.user("alice"))
          assert.strictEqual(grants.length, 2)
          const revoked = yield* gateway.revokeGrant(Caller.operator("carol"), third.id)
          assert.strictEqual(revoked.status, "revoked")
          const tape = yield* gateway.readTape(Caller.operator("op"), run.sessionId, { afterSeq: 0 })
          assert.strictEqual(tape.at(-1)?._tag === "GrantChanged" && tape.at(-1)?._tag, "GrantChanged")
        })
      )
      // After revocation the same call needs approval again (new run, same session key not needed: always-scope).
    })
  )

  it.effect("an expiring grant stops applying at its expiry (TestClock)", () =>
    Effect.gen(function* () {
      const { tool: shell, calls } = recordingTool("shell.exec", "sensitive")
      const model = ScriptedModel.make((req) =>
        req.messages.at(-1)?.role === "tool" ? { text: "ok" } : { toolCalls: [{ name: "shell.exec", args: { x: 9 } }] }
      )
      const policy = Layer.effect(PolicyEngine.PolicyEngine, CedarPolicy.make())
      yield* withGateway({ model, tools: [shell], policy: policy as never }, (gateway) =>
        Effect.gen(function* () {
          const first = yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "go" })
          const f1 = yield* Effect.fork(collect(first.events))
          const approval = yield* pendingApproval(gateway, first.run.id)
          const now = yield* TestClock.currentTimeMillis
          yield* gateway.resolveApproval(Caller.operator("bob"), {
            approvalId: approval.id,
            decision: "approve",
            scope: "always",
            grantExpiresAt: now + 60_000
          })
          yield* Fiber.join(f1)
          const second = yield* collect(
            (yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "go" })).events
          )
          const decided = second.find((e) => e._tag === "PolicyDecided")
          assert.deepStrictEqual(decided?._tag === "PolicyDecided" && decided.policyIds, [`grant:${approval.id}`])
          yield* TestClock.adjust("2 minutes")
          const third = yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "go" })
          const f3 = yield* Effect.fork(collect(third.events))
          const again = yield* pendingApproval(gateway, third.run.id)
          assert.isDefined(again)
          yield* gateway.resolveApproval(Caller.operator("bob"), { approvalId: again.id, decision: "deny" })
          yield* Fiber.join(f3)
          assert.strictEqual(calls.length, 2)
        })
      )
    })
  )
})

import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Logger, LogLevel, Schedule, TestClock } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import {
  Caller,
  createPalyra,
  defineTool,
  PolicyEngine,
  ScriptedModel,
  scriptedModel,
  type TapeEvent
} from "../src/index.js"
import { collect } from "../src/testing.js"
import { standingGrant } from "./fixtures/grant.js"
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

  it.effect("the built-in schema and policies are valid (checked here: a start on them does not re-validate)", () =>
    Effect.gen(function* () {
      assert.strictEqual(cedar.checkParseSchema(CedarPolicy.schema).type, "success")
      const parts = cedar.policySetTextToParts(CedarPolicy.defaultPolicies)
      assert.strictEqual(parts.type, "success")
      const policies = parts.type === "success" ? parts.policies : []
      assert.isAbove(policies.length, 0)
      const validation = cedar.validate({
        schema: CedarPolicy.schema,
        policies: { staticPolicies: Object.fromEntries(policies.map((p, i) => [`p${i}`, p])) },
        validationSettings: { mode: "strict" }
      })
      assert.strictEqual(validation.type, "success")
      assert.deepStrictEqual(validation.type === "success" ? validation.validationErrors : ["failed"], [])
      // Any other text is validated at start: the built-ins plus a policy the schema rejects fail.
      const rejected = yield* Effect.flip(
        CedarPolicy.make({
          policies: `${CedarPolicy.defaultPolicies}\npermit (principal, action, resource is Palyra::Tool) when { resource.colour == "red" };`
        })
      )
      assert.strictEqual(rejected._tag, "InvalidArgument")
      assert.match(rejected.message, /colour/)
    })
  )

  it("the built-in policies written out are what Cedar reads", () => {
    const fields = (policies: Either.Either.Right<ReturnType<typeof CedarPolicy.readPolicies>>) =>
      policies.map(({ id, text, reason, actions, readsNow, readsArgsDigest, readsSession }) => ({
        id,
        text,
        reason,
        actions,
        readsNow,
        readsArgsDigest,
        readsSession
      }))
    const viaCedar = CedarPolicy.readPolicies(CedarPolicy.defaultPolicies, true)
    const written = CedarPolicy.readPolicies(CedarPolicy.defaultPolicies)
    assert.isTrue(Either.isRight(viaCedar) && Either.isRight(written))
    const [cedarRead, writtenOut] = [Either.getOrThrow(viaCedar), Either.getOrThrow(written)]
    assert.strictEqual(cedarRead.length, 3)
    assert.deepStrictEqual(fields(writtenOut), fields(cedarRead))
  })

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

const grant = standingGrant

describe("Cedar engine: everything from Cedar's parser", () => {
  it.effect("ids, reasons and action scopes come from the JSON form, whatever the text looks like", () =>
    Effect.gen(function* () {
      const fillers = Array.from(
        { length: 6 },
        (_, i) => `@id("filler-${i}")
permit (principal == Palyra::Principal::"nobody-${i}", action == Palyra::Action::"tool.execute", resource);`
      )
      const engine = yield* CedarPolicy.make({
        policies: [
          `@id("scoped-by-comment")
@reason("a reason with ) and @id(\\"decoy\\") in it")
permit (
  principal == Palyra::Principal::"alice",
  // not: action == Palyra::Action::"tool.request_approval"
  action == Palyra::Action::"tool.execute",
  resource == Palyra::Tool::"commented"
);`,
          `@id("approvals-for-sensitive")
permit (principal, action == Palyra::Action::"tool.request_approval", resource is Palyra::Tool)
when { resource.risk == "sensitive" };`,
          // Both actions in the scope: the condition makes it apply to the approval step only, so
          // it decides only if it is in the approval set too.
          `@id("no-approvals-for-frank")
@reason("frank cannot ask for approvals")
forbid (
  principal == Palyra::Principal::"frank",
  action in [Palyra::Action::"tool.execute", Palyra::Action::"tool.request_approval"],
  resource
) when { action == Palyra::Action::"tool.request_approval" };`,
          `@id("no-approvals-for-gina")
forbid (principal == Palyra::Principal::"gina", action, resource)
when { action == Palyra::Action::"tool.request_approval" };`,
          `@id("approval-via-in")
permit (principal == Palyra::Principal::"carol", action in [Palyra::Action::"tool.request_approval"], resource);`,
          ...fillers,
          // The twelfth policy has no @id: it is Cedar's policy11 (the parts come back sorted by
          // name, policy0, policy1, policy10, policy11, policy2, …).
          `permit (principal == Palyra::Principal::"dave", action == Palyra::Action::"tool.execute", resource);`
        ].join("\n\n")
      })
      const alice = yield* engine.decide(request("commented", "sensitive"))
      assert.deepStrictEqual(alice, {
        decision: "allow",
        policyIds: ["scoped-by-comment"],
        reasons: ['a reason with ) and @id("decoy") in it']
      })
      const frank = yield* engine.decide(request("fs.write", "sensitive", { principal: "frank" }))
      assert.deepStrictEqual(
        [frank.decision, frank.policyIds, frank.reasons],
        ["deny", ["no-approvals-for-frank"], ["frank cannot ask for approvals"]]
      )
      const gina = yield* engine.decide(request("fs.write", "sensitive", { principal: "gina" }))
      assert.deepStrictEqual([gina.decision, gina.policyIds], ["deny", ["no-approvals-for-gina"]])
      const henry = yield* engine.decide(request("fs.write", "sensitive", { principal: "henry" }))
      assert.deepStrictEqual([henry.decision, henry.policyIds], ["require_approval", ["approvals-for-sensitive"]])
      const carol = yield* engine.decide(request("time.now", "low", { principal: "carol" }))
      assert.deepStrictEqual([carol.decision, carol.policyIds], ["require_approval", ["approval-via-in"]])
      const dave = yield* engine.decide(request("time.now", "low", { principal: "dave" }))
      assert.deepStrictEqual([dave.decision, dave.policyIds, dave.reasons], ["allow", ["policy11"], ["policy11"]])
    })
  )

  it.effect("only a policy that reads context.now turns the cache off (found in the JSON form, not the text)", () =>
    Effect.gen(function* () {
      const mentions = yield* CedarPolicy.make({
        policies: `// context.now is not read here
permit (principal, action == Palyra::Action::"tool.execute", resource)
when { context.channel != "context.now" };`
      })
      const first = yield* mentions.decide(request("time.now", "low"))
      assert.strictEqual(first.decision, "allow")
      assert.strictEqual(yield* mentions.decide(request("time.now", "low")), first, "served from the cache")

      const reads = yield* CedarPolicy.make({
        policies: `permit (principal, action == Palyra::Action::"tool.execute", resource);
@id("closed-after-1s")
forbid (principal, action, resource) when { context.now >= 1000 };`
      })
      const before = yield* reads.decide(request("time.now", "low"))
      assert.strictEqual(before.decision, "allow")
      assert.notStrictEqual(yield* reads.decide(request("time.now", "low")), before, "not cached")
      yield* TestClock.adjust("2 seconds")
      const after = yield* reads.decide(request("time.now", "low"))
      assert.deepStrictEqual([after.decision, after.policyIds], ["deny", ["closed-after-1s"]])
    })
  )

  it.effect(
    "decisions are shared across args and sessions unless a policy in force reads context.argsDigest or context.session",
    () =>
      Effect.gen(function* () {
        const S1 = "01KA0000000000000000000SE1" as never
        const S2 = "01KA0000000000000000000SE2" as never
        // No policy reads either field: one decision serves any args and any session (one Cedar call).
        const plain = yield* CedarPolicy.make()
        const first = yield* plain.decide(request("time.now", "low", { argsDigest: "a", sessionId: S1 }))
        assert.strictEqual(first.decision, "allow")
        assert.strictEqual(yield* plain.decide(request("time.now", "low", { argsDigest: "b", sessionId: S2 })), first)

        // A policy reads the args' digest: each digest is decided (and cached) on its own.
        const byArgs = yield* CedarPolicy.make({
          policies: `permit (principal, action == Palyra::Action::"tool.execute", resource);
@id("no-bad-args")
forbid (principal, action, resource) when { context.argsDigest == "bad" };`
        })
        const ok = yield* byArgs.decide(request("time.now", "low", { argsDigest: "ok" }))
        assert.strictEqual(ok.decision, "allow")
        const bad = yield* byArgs.decide(request("time.now", "low", { argsDigest: "bad" }))
        assert.deepStrictEqual([bad.decision, bad.policyIds], ["deny", ["no-bad-args"]])
        assert.strictEqual(
          yield* byArgs.decide(request("time.now", "low", { argsDigest: "ok" })),
          ok,
          "cached per digest"
        )

        // A policy reads the session: each session is decided on its own.
        const bySession = yield* CedarPolicy.make({
          policies: `permit (principal, action == Palyra::Action::"tool.execute", resource);
@id("not-in-s2")
forbid (principal, action, resource) when { context.session == "${S2}" };`
        })
        assert.strictEqual((yield* bySession.decide(request("time.now", "low", { sessionId: S1 }))).decision, "allow")
        const inS2 = yield* bySession.decide(request("time.now", "low", { sessionId: S2 }))
        assert.deepStrictEqual([inS2.decision, inS2.policyIds], ["deny", ["not-in-s2"]])
        // A reload to policies that read neither shares decisions again.
        yield* bySession.reload(CedarPolicy.defaultPolicies)
        const again = yield* bySession.decide(request("time.now", "low", { sessionId: S1 }))
        assert.strictEqual(yield* bySession.decide(request("time.now", "low", { sessionId: S2 })), again)
      })
  )

  it.effect("templates, empty or duplicate ids and the grant namespace are rejected; the old set stays", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make()
      const version = yield* engine.version
      const rejected = (text: string) => Effect.map(Effect.flip(engine.reload(text)), (e) => e.message)
      assert.match(yield* rejected(`permit (principal == ?principal, action, resource);`), /templates/)
      assert.match(
        yield* rejected(
          `@id("x") permit (principal, action, resource);\n@id("x") forbid (principal, action, resource);`
        ),
        /x: two policies have this id/
      )
      assert.match(
        yield* rejected(`permit (principal, action, resource);\n@id("policy0") forbid (principal, action, resource);`),
        /policy0: two policies have this id/
      )
      assert.match(yield* rejected(`@id permit (principal, action, resource);`), /@id needs a non-empty value/)
      assert.match(
        yield* rejected(`@id("grant:01KA0000000000000000000APP") permit (principal, action, resource);`),
        /name standing grants/
      )
      assert.strictEqual(yield* engine.version, version)
      assert.deepStrictEqual((yield* engine.decide(request("time.now", "low"))).policyIds, ["default.low-risk-allowed"])
    })
  )
})

describe("Cedar engine: pre-parsed sets are reused, not leaked", () => {
  it.effect(
    "250 reloads and grant changes keep the prepared sets and wasm memory bounded",
    () =>
      Effect.gen(function* () {
        // 20 policies per version: about 45 kB of wasm memory per pre-parsed set, so keeping every
        // version (two sets each) would take about 22 MB over 250 changes.
        const base = (n: number) =>
          [
            CedarPolicy.defaultPolicies,
            ...Array.from(
              { length: 17 },
              (_, i) => `@id("team.rule-${i}")
permit (principal == Palyra::Principal::"user-${n}-${i}", action == Palyra::Action::"tool.execute", resource is Palyra::Tool)
when { resource.category == "cat-${i % 7}" && context.channel != "blocked" && context.session like "01*" };`
            )
          ].join("\n\n")
        const engine = yield* CedarPolicy.make({ policies: base(0) })
        yield* engine.reload(base(1)) // both slots in use from here on
        const sets = CedarPolicy.preparedSetCount()
        const external = process.memoryUsage().external
        const grantId = (n: number) => `01KA00000000000000000G${String(n).padStart(4, "0")}`
        for (let n = 0; n < 250; n++) {
          // Every tenth change a reload, the others a new window of the three latest grants.
          if (n % 10 === 0) yield* engine.reload(base(n))
          else yield* engine.setGrants([n - 2, n - 1, n].filter((i) => i >= 0).map((i) => grant(grantId(i))))
        }
        assert.strictEqual(yield* engine.version, 252)
        assert.strictEqual(CedarPolicy.preparedSetCount(), sets, "no new pre-parsed set ids")
        const grown = process.memoryUsage().external - external
        assert.isBelow(grown, 8 * 1024 * 1024, `wasm memory grew by ${grown} bytes`)
        // The last version is the one in force: base(240) plus the grants of changes 247 to 249.
        const user = yield* engine.decide({
          ...request("t", "sensitive", { principal: "user-240-3" }),
          tool: { name: "t", risk: "sensitive", category: "cat-3" }
        })
        assert.deepStrictEqual([user.decision, user.policyIds], ["allow", ["team.rule-3"]])
        const granted = yield* engine.decide(request("shell.exec", "sensitive"))
        assert.deepStrictEqual(
          [granted.decision, granted.policyIds],
          ["allow", [`grant:${grantId(247)}`, `grant:${grantId(248)}`, `grant:${grantId(249)}`]]
        )
      }),
    // CPU-bound wasm work: ~3 s on an idle 2-core machine, several times that beside the other
    // packages' suites in CI.
    120_000
  )

  it("engines that are garbage collected hand their slots to the next engines", async () => {
    setFlagsFromString("--expose-gc")
    const gc = runInNewContext("gc") as () => void
    const makeMany = () => {
      for (let i = 0; i < 30; i++) Effect.runSync(CedarPolicy.make())
    }
    const settle = async () => {
      for (let i = 0; i < 5; i++) {
        gc()
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
    }
    makeMany()
    await settle()
    const afterFirst = CedarPolicy.preparedSetCount()
    for (let round = 0; round < 3; round++) {
      makeMany()
      await settle()
    }
    // Without reuse every round would add 120 sets (30 engines, 4 slots each); a straggler the
    // collector has not finalized yet may hold a few.
    assert.isBelow(CedarPolicy.preparedSetCount(), afterFirst + 120)
  })
})

describe("Cedar engine: hot reload runs in the caller's fiber context", () => {
  it.live("a rejected reload logs through the caller's logger, at the caller's log level", () => {
    const logs: Array<{ readonly level: string; readonly message: string }> = []
    const logger = Logger.make(({ logLevel, message }) => {
      logs.push({ level: logLevel.label, message: Array.isArray(message) ? message.join(" ") : String(message) })
    })
    return Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "palyra-policies-"))
      writeFileSync(join(dir, "base.cedar"), CedarPolicy.defaultPolicies)
      const engine = yield* CedarPolicy.make({ policies: yield* CedarPolicy.readPolicyDirectory(dir) })
      const results: Array<boolean> = []
      yield* CedarPolicy.watchDirectory(engine, dir, (r) => results.push(r.ok))
      const settled = (n: number) =>
        Effect.sync(() => results.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (length) => length >= n }),
          Effect.timeout("5 seconds")
        )
      writeFileSync(join(dir, "extra.cedar"), `forbid (principal, action, resource == Palyra::Tool::"x");`)
      yield* settled(1)
      writeFileSync(join(dir, "broken.cedar"), "permit (")
      yield* settled(2)
      assert.deepStrictEqual(results, [true, false])
      // The info line of the good reload is below the caller's minimum level; the error is not.
      assert.deepStrictEqual(
        logs.map((l) => l.level),
        ["ERROR"]
      )
      assert.match(
        logs[0]!.message,
        /policy reload rejected; the previous policies stay in force .*policy set rejected/s
      )
    }).pipe(
      Effect.scoped,
      Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  })
})

describe("grants, described by the engine that evaluates them", () => {
  it.effect("the Cedar engine renders a grant from the JSON policy it evaluates; hostile names stay data", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make()
      const hostile = 'mallory"), action, resource); permit (principal'
      const g = grant("01KA0000000000000000000APP", { principal: hostile, grantExpiresAt: 1_000_000 })
      const text = engine.describeGrant(g)
      assert.strictEqual(text, CedarPolicy.grantPolicy(g))
      const parts = cedar.policySetTextToParts(text)
      assert.strictEqual(parts.type === "success" && parts.policies.length, 1)
      const json = cedar.policyToJson(text)
      assert.deepStrictEqual(json.type === "success" && json.json.principal, {
        op: "==",
        entity: { type: "Palyra::Principal", id: hostile }
      })
      assert.match(text, /context\.argsDigest == "d"/)
      assert.match(text, /context\.now < 1000000/)
      yield* engine.setGrants([g])
      const forMallory = yield* engine.decide(request("shell.exec", "sensitive", { principal: hostile }))
      assert.deepStrictEqual(
        [forMallory.decision, forMallory.policyIds],
        ["allow", ["grant:01KA0000000000000000000APP"]]
      )
      assert.deepStrictEqual(forMallory.reasons, ["always-scope approval by bob"])
      const forOthers = yield* engine.decide(request("shell.exec", "sensitive", { principal: "mallory" }))
      assert.strictEqual(forOthers.decision, "require_approval")
    })
  )

  it("the rule-based engine describes a grant in words", () => {
    const describe = PolicyEngine.makeRules().describeGrant!
    assert.strictEqual(
      describe(
        grant("01KA0000000000000000000APP", {
          argsDigest: "3f2a9c0d1e2b4f5a6b7c",
          grantExpiresAt: 0,
          grantMaxUses: 5,
          grantUses: 3
        })
      ),
      'permit tool.execute of "shell.exec" for "alice" with the approved arguments (digest 3f2a9c0d1e2b…), until 1970-01-01T00:00:00.000Z, 2 of 5 uses left (always-scope approval by bob)'
    )
    assert.strictEqual(
      describe(grant("01KA0000000000000000000APP", { scope: "session", grantExpiresAt: Number.MAX_SAFE_INTEGER })),
      `permit tool.execute of "shell.exec" for "alice" in session 01KA0000000000000000000SES, until ${Number.MAX_SAFE_INTEGER} ms (session-scope approval by bob)`
    )
  })
})

describe("Cedar through the Promise API", () => {
  it("createPalyra takes the Cedar engine as a value; a forbidden tool is denied with the Cedar policy id", async () => {
    let ran = false
    const palyra = createPalyra({
      model: scriptedModel([{ toolCalls: [{ name: "disk.wipe", args: {} }] }, { text: "Could not wipe." }]),
      tools: [
        defineTool({
          name: "disk.wipe",
          description: "Wipe the disk",
          parameters: { type: "object" },
          risk: "low",
          execute: () => {
            ran = true
            return "wiped"
          }
        })
      ],
      policy: CedarPolicy.adapter({
        policies: `${CedarPolicy.defaultPolicies}
@id("ops.never-wipe")
@reason("wiping disks is never allowed")
forbid (principal, action, resource == Palyra::Tool::"disk.wipe");`
      })
    })
    try {
      const result = await palyra.run("wipe the disk")
      const decided = result.events.filter((e) => e._tag === "PolicyDecided")
      assert.deepStrictEqual(
        decided.map((d) => [d.decision, d.policyIds, d.reasons]),
        [["deny", ["ops.never-wipe"], ["wiping disks is never allowed"]]]
      )
      assert.isFalse(ran)
      assert.strictEqual(result.text, "Could not wipe.")
    } finally {
      await palyra.close()
    }
  })

  it("an invalid Cedar text fails the instance's calls with Cedar's diagnostics", async () => {
    const palyra = createPalyra({ model: scriptedModel([]), policy: CedarPolicy.adapter({ policies: "permit (" }) })
    try {
      const error = await palyra.run("hello").then(
        () => undefined,
        (e: unknown) => e
      )
      assert.strictEqual((error as { _tag?: string })._tag, "InvalidArgument")
      assert.match((error as Error).message, /policy set rejected/)
    } finally {
      await palyra.close()
    }
  })
})

import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, type Ids, type Journal, MemoryJournal, PolicyEngine, type TapeEvent } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { collect, gatewayLayer, ScriptedModel } from "@palyra/core/testing"
import { type Context, Effect, Fiber, Layer, Schedule } from "effect"
import { Plugins } from "../src/index.js"
import { exampleDir, sandboxDirs, wasmOf, withCustomSection, writePlugin } from "./support/fixtures.js"

const wordCount = JSON.parse(readFileSync(join(exampleDir("word-count"), "plugin.json"), "utf8")) as Record<
  string,
  unknown
>

/** Run `body` against a Gateway with the real Cedar engine (default policies) and these tools. */
const withGateway = <A, E>(
  model: ScriptedModel.ScriptedModel,
  tools: ReadonlyArray<Plugins.LoadedPlugin>,
  body: (gateway: Gateway.Service) => Effect.Effect<A, E>,
  journal?: Context.Context<Journal.Journal>
) =>
  Effect.flatMap(Gateway.Gateway, body).pipe(
    Effect.provide(
      gatewayLayer({
        model,
        tools: tools.map((p) => p.tool),
        ...(journal === undefined ? {} : { journal: Layer.succeedContext(journal) }),
        policy: Layer.effect(PolicyEngine.PolicyEngine, CedarPolicy.make()) as never
      }) as Layer.Layer<Gateway.Gateway>
    )
  )

/** The run's pending approvals, once there is one that is not in `seen` (polled with a real delay). */
const nextApproval = (gateway: Gateway.Service, runId: Ids.RunId, seen: ReadonlySet<string>) =>
  gateway.listApprovals(Caller.operator("op"), { runId, status: "pending" }).pipe(
    Effect.map((list) => list.find((a) => !seen.has(a.id))),
    Effect.filterOrFail((found) => found !== undefined),
    Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 1_000 }),
    Effect.map((found) => found!)
  )

const resultsOf = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.filter((e): e is TapeEvent.TapeEventOf<"ToolResult"> => e._tag === "ToolResult")

describe("plugins through the real Gateway", () => {
  it.scopedLive("word-count runs under the default Cedar policies; its result on the tape names the digest", () =>
    Effect.gen(function* () {
      const { workspace } = yield* sandboxDirs
      writeFileSync(join(workspace, "notes.md"), "one two three\n")
      const plugin = yield* Plugins.load(exampleDir("word-count"), { workspace })
      const model = ScriptedModel.make([
        { toolCalls: [{ name: plugin.tool.name, args: { path: "notes.md" } }] },
        { toolCalls: [{ name: plugin.tool.name, args: { path: "../escape.md" } }] },
        { text: "three words" }
      ])
      yield* withGateway(model, [plugin], (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "count notes.md" })
          const seen = yield* collect(events)
          const decided = seen.filter((e): e is TapeEvent.TapeEventOf<"PolicyDecided"> => e._tag === "PolicyDecided")
          assert.deepStrictEqual(
            decided.map((d) => [d.tool, d.decision]),
            [
              [plugin.tool.name, "allow"],
              [plugin.tool.name, "allow"]
            ]
          )
          const [counted, escaped] = resultsOf(seen)
          assert.strictEqual(counted?.status, "ok")
          const output = JSON.parse(counted!.output)
          assert.deepStrictEqual(output.plugin, { name: "word-count", digest: `sha256:${plugin.digest}` })
          assert.deepStrictEqual(output.output, { path: "notes.md", lines: 1, words: 3, bytes: 14 })
          assert.match(JSON.parse(escaped!.output).output.error, /^refused: .* outside the workspace/)
          // The journal holds what the stream showed.
          const tape = yield* gateway.readTape(Caller.operator("op"), run.sessionId, { afterSeq: 0 })
          assert.include(
            resultsOf(tape)
              .map((r) => r.output)
              .join("\n"),
            `"digest":"sha256:${plugin.digest}"`
          )
        })
      )
    })
  )

  it.scopedLive("a session grant for one module does not cover the changed module", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      writeFileSync(join(workspace, "a.txt"), "alpha beta\n")
      const manifest = { ...wordCount, risk: "sensitive" }
      const v1 = yield* Plugins.load(writePlugin(plugins, "v1", manifest, wasmOf("examples", "word-count")), {
        workspace
      })
      const v2 = yield* Plugins.load(
        writePlugin(plugins, "v2", manifest, withCustomSection(wasmOf("examples", "word-count"), "v2")),
        { workspace }
      )
      assert.notStrictEqual(v1.digest, v2.digest)
      assert.notStrictEqual(v1.tool.name, v2.tool.name)
      const args = { path: "a.txt" }
      const model = ScriptedModel.make([
        { toolCalls: [{ name: v1.tool.name, args }] },
        { toolCalls: [{ name: v1.tool.name, args: { path: "a.txt" } }] },
        { toolCalls: [{ name: v2.tool.name, args }] },
        { text: "done" }
      ])
      yield* withGateway(model, [v1, v2], (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "count" })
          const fiber = yield* Effect.fork(collect(events))
          const first = yield* nextApproval(gateway, run.id, new Set())
          assert.strictEqual(first.tool, v1.tool.name)
          yield* gateway.resolveApproval(Caller.operator("bob"), {
            approvalId: first.id,
            decision: "approve",
            scope: "session"
          })
          // The second call of v1 is covered by the grant; the changed module needs a human again.
          const second = yield* nextApproval(gateway, run.id, new Set([first.id]))
          assert.strictEqual(second.tool, v2.tool.name)
          yield* gateway.resolveApproval(Caller.operator("bob"), { approvalId: second.id, decision: "deny" })
          const seen = yield* Fiber.join(fiber)
          assert.deepStrictEqual(
            resultsOf(seen).map((r) => [r.tool, r.status]),
            [
              [v1.tool.name, "ok"],
              [v1.tool.name, "ok"],
              [v2.tool.name, "denied"]
            ]
          )
          assert.strictEqual(v1.invocations(), 2)
          assert.strictEqual(v2.invocations(), 0)
        })
      )
    })
  )

  it.scopedLive("an always grant for one module and these arguments does not cover the changed module", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      writeFileSync(join(workspace, "a.txt"), "alpha beta\n")
      const manifest = { ...wordCount, risk: "sensitive" }
      const v1 = yield* Plugins.load(writePlugin(plugins, "v1", manifest, wasmOf("examples", "word-count")), {
        workspace
      })
      const model = ScriptedModel.make([
        { toolCalls: [{ name: v1.tool.name, args: { path: "a.txt" } }] },
        { text: "ok" }
      ])
      // Grant `always` for v1; then the file changes and the daemon starts again over the same journal.
      const journal = yield* Layer.build(MemoryJournal.layer())
      yield* withGateway(
        model,
        [v1],
        (gateway) =>
          Effect.gen(function* () {
            const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "count" })
            const fiber = yield* Effect.fork(collect(events))
            const first = yield* nextApproval(gateway, run.id, new Set())
            yield* gateway.resolveApproval(Caller.operator("bob"), {
              approvalId: first.id,
              decision: "approve",
              scope: "always"
            })
            assert.deepStrictEqual(
              resultsOf(yield* Fiber.join(fiber)).map((r) => r.status),
              ["ok"]
            )
          }),
        journal
      )
      // Same file name, same manifest, changed bytes: a new digest.
      writeFileSync(join(plugins, "v1", "plugin.wasm"), withCustomSection(wasmOf("examples", "word-count"), "changed"))
      const v2 = yield* Plugins.load(join(plugins, "v1"), { workspace })
      assert.notStrictEqual(v2.digest, v1.digest)
      const model2 = ScriptedModel.make([
        { toolCalls: [{ name: v2.tool.name, args: { path: "a.txt" } }] },
        { text: "ok" }
      ])
      yield* withGateway(
        model2,
        [v2],
        (gateway) =>
          Effect.gen(function* () {
            const grants = yield* gateway.listGrants(Caller.user("alice"))
            assert.strictEqual(grants.length, 1)
            assert.strictEqual(grants[0]?.tool, v1.tool.name)
            const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "count again" })
            const fiber = yield* Effect.fork(collect(events))
            const pending = yield* nextApproval(gateway, run.id, new Set())
            assert.strictEqual(pending.tool, v2.tool.name)
            yield* gateway.resolveApproval(Caller.operator("bob"), { approvalId: pending.id, decision: "deny" })
            assert.deepStrictEqual(
              resultsOf(yield* Fiber.join(fiber)).map((r) => r.status),
              ["denied"]
            )
            assert.strictEqual(v2.invocations(), 0)
          }),
        journal
      )
    })
  )

  it.scopedLive("Cedar sees the digest: a policy naming the vetted module permits it and not a changed one", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      const manifest = { ...wordCount, risk: "sensitive" }
      const vetted = yield* Plugins.load(writePlugin(plugins, "v1", manifest, wasmOf("examples", "word-count")), {
        workspace
      })
      const changed = yield* Plugins.load(
        writePlugin(plugins, "v2", manifest, withCustomSection(wasmOf("examples", "word-count"), "v2")),
        { workspace }
      )
      const engine = yield* CedarPolicy.make({
        policies: `@id("vetted-word-count")
permit (principal, action == Palyra::Action::"tool.execute", resource == Palyra::Tool::"${vetted.tool.name}");`
      })
      const decide = (plugin: Plugins.LoadedPlugin) =>
        engine.decide({
          principal: "alice",
          sessionId: "01J00000000000000000000000" as Ids.SessionId,
          channel: null,
          tool: { name: plugin.tool.name, risk: plugin.tool.risk, category: plugin.tool.category },
          args: { path: "a.txt" }
        })
      const allowed = yield* decide(vetted)
      assert.deepStrictEqual([allowed.decision, allowed.policyIds], ["allow", ["vetted-word-count"]])
      assert.strictEqual((yield* decide(changed)).decision, "deny")
    })
  )
})

/**
 * Agents over a real Gateway (`gatewayLayer`, in-memory journal checked against the run state
 * machine) with scripted models that record every prompt: each agent answers with its own
 * instructions, models and tools; sessions keep their agent; usage routing and fail-over are on the
 * tape; bindings pick the agent of a channel conversation; bad configuration is refused.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Stream } from "effect"
import {
  Caller,
  Errors,
  Gateway,
  Journal,
  MemoryJournal,
  type ModelProvider,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import * as Agents from "../src/kernel/Agents.js"
import { collect, type GatewayLayerOptions, gatewayLayer } from "../src/testing.js"
import { recordingTool } from "./helpers.js"

type Ev = TapeEvent.TapeEvent
const only = <T extends Ev["_tag"]>(events: ReadonlyArray<Ev>, tag: T) =>
  events.filter((e): e is TapeEvent.TapeEventOf<T> => e._tag === tag)

const alice = Caller.user("alice")
const operator = Caller.operator("op")

/** Run `body` against a Gateway (and its journal and registry) built from `options`. */
const withKernel = <A, E>(
  options: GatewayLayerOptions,
  body: (gateway: Gateway.Service, journal: Journal.Service, agents: Agents.Service) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    return yield* body(yield* Gateway.Gateway, yield* Journal.Journal, yield* Agents.AgentRegistry)
  }).pipe(
    Effect.provide(gatewayLayer(options) as Layer.Layer<Gateway.Gateway | Journal.Journal | Agents.AgentRegistry>),
    Effect.scoped
  )

/** A model that must never be called (the test fails with a clear message if it is). */
const unused = (name: string) => ScriptedModel.make([], { name })

describe("Agents", () => {
  it.effect("two agents answer with their own instructions and models, and use only their own tools", () =>
    Effect.gen(function* () {
      const kb = recordingTool("kb.search", "low")
      const math = recordingTool("math.double", "low")
      // The support agent's model asks for a math tool it does not have, then answers.
      const supportModel = ScriptedModel.make(
        [
          { toolCalls: [{ name: "math.double", args: { x: 2 } }] },
          { toolCalls: [{ name: "kb.search", args: { x: 1 } }] },
          { text: "From the KB." }
        ],
        { name: "support-model" }
      )
      const opsModel = ScriptedModel.make([{ toolCalls: [{ name: "math.double", args: { x: 21 } }] }, { text: "42" }], {
        name: "ops-model"
      })
      const kernelModel = unused("kernel-model")
      yield* withKernel(
        {
          model: kernelModel,
          tools: [kb.tool, math.tool],
          instructions: "You are the default agent.",
          agents: [
            {
              id: "support",
              instructions: "You answer from the knowledge base.",
              model: supportModel,
              tools: ["kb.search"]
            },
            { id: "ops", instructions: "You do arithmetic.", model: opsModel, tools: ["math.*"] }
          ]
        },
        (gateway) =>
          Effect.gen(function* () {
            const support = yield* gateway.startRun(alice, { text: "double 2", agent: "support" })
            const supportEvents = yield* collect(support.events)
            assert.strictEqual(support.session.agentId, "support")
            const ops = yield* gateway.startRun(alice, { text: "double 21", agent: "ops" })
            const opsEvents = yield* collect(ops.events)

            // Each model saw only its agent's instructions and tools.
            assert.deepStrictEqual(
              supportModel.prompts.map((p) => [p.instructions, p.tools.map((t) => t.name)]),
              Array.from({ length: 3 }, () => ["You answer from the knowledge base.", ["kb.search"]])
            )
            assert.deepStrictEqual(
              opsModel.prompts.map((p) => [p.instructions, p.tools.map((t) => t.name)]),
              Array.from({ length: 2 }, () => ["You do arithmetic.", ["math.double"]])
            )
            assert.strictEqual(kernelModel.prompts.length, 0)

            // The support agent's call to a tool outside its list was unknown to it and never ran.
            const [refused, searched] = only(supportEvents, "ToolResult")
            assert.deepStrictEqual(
              [refused!.tool, refused!.status, refused!.output],
              ["math.double", "error", "unknown tool: math.double"]
            )
            assert.strictEqual(only(supportEvents, "PolicyDecided").length, 1)
            assert.deepStrictEqual([searched!.tool, searched!.status], ["kb.search", "ok"])
            assert.deepStrictEqual(kb.calls, [{ x: 1 }])
            // The ops agent's own tool ran, once.
            assert.deepStrictEqual(math.calls, [{ x: 21 }])
            assert.strictEqual(only(opsEvents, "ToolResult")[0]!.status, "ok")
            assert.deepStrictEqual(
              only(supportEvents, "ModelRequest").map((r) => [r.model, r.routing?.agent, r.tools]),
              Array.from({ length: 3 }, () => ["support-model", "support", ["kb.search"]])
            )
            assert.strictEqual(only(supportEvents, "AssistantMessage").at(-1)!.text, "From the KB.")
            assert.strictEqual(only(opsEvents, "AssistantMessage").at(-1)!.text, "42")
          })
      )
    })
  )

  it.effect("the default agent is the kernel's model, instructions and every tool", () =>
    Effect.gen(function* () {
      const math = recordingTool("math.double", "low")
      const model = ScriptedModel.make([{ text: "hi" }], { name: "kernel-model" })
      yield* withKernel(
        {
          model,
          tools: [math.tool],
          instructions: "Be brief.",
          agents: [{ id: "quiet", description: "No tools", tools: [] }]
        },
        (gateway) =>
          Effect.gen(function* () {
            const { session, events } = yield* gateway.startRun(alice, { text: "hello" })
            yield* collect(events)
            assert.strictEqual(session.agentId, "default")
            assert.deepStrictEqual(
              model.prompts[0]!.tools.map((t) => t.name),
              ["math.double"]
            )
            assert.strictEqual(model.prompts[0]!.instructions, "Be brief.")
            assert.deepStrictEqual(yield* gateway.listAgents(alice), [
              {
                id: "default",
                description: null,
                tools: ["math.double"],
                models: ["kernel-model"],
                routedModels: [],
                routingThreshold: null
              },
              {
                id: "quiet",
                description: "No tools",
                tools: [],
                models: ["kernel-model"],
                routedModels: [],
                routingThreshold: null
              }
            ])
          })
      )
    })
  )

  it.effect("a session keeps its agent: asking for another is Conflict, an unknown one InvalidArgument", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "ok" }), { name: "m" })
      yield* withKernel({ model, agents: [{ id: "support" }, { id: "ops" }] }, (gateway, journal) =>
        Effect.gen(function* () {
          const first = yield* gateway.sendMessage(alice, { text: "one", key: "desk", agent: "support" })
          assert.strictEqual(first.session.agentId, "support")
          yield* gateway.awaitRun(alice, first.run.id)
          // The same key without an agent: the same session, still support.
          const again = yield* gateway.sendMessage(alice, { text: "two", key: "desk" })
          assert.strictEqual(again.session.id, first.session.id)
          assert.strictEqual(again.session.agentId, "support")
          yield* gateway.awaitRun(alice, again.run.id)
          // Naming the agent it has is fine; naming another is a conflict, by key or by id.
          yield* gateway.resolveSession(alice, { key: "desk", agent: "support" })
          const byKey = yield* Effect.flip(gateway.sendMessage(alice, { text: "three", key: "desk", agent: "ops" }))
          assert.strictEqual(byKey._tag, "Conflict")
          const byId = yield* Effect.flip(
            gateway.sendMessage(alice, { text: "three", sessionId: first.session.id, agent: "ops" })
          )
          assert.strictEqual(byId._tag, "Conflict")
          // An unknown agent is a bad argument, and creates nothing.
          const unknown = yield* Effect.flip(gateway.sendMessage(alice, { text: "x", key: "new", agent: "nobody" }))
          assert.strictEqual(unknown._tag, "InvalidArgument")
          assert.strictEqual((unknown as Errors.InvalidArgument).field, "agent")
          assert.isTrue(Option.isNone(yield* journal.findSessionByKey("alice", "new")))
          // The refused messages started no run.
          const runs = yield* gateway.listRuns(alice, { sessionId: first.session.id })
          assert.strictEqual(runs.length, 2)
          // A branch and a reset keep the agent.
          const branch = yield* gateway.branchSession(alice, first.session.id)
          assert.strictEqual(branch.agentId, "support")
          const reset = yield* gateway.resetSession(alice, first.session.id)
          assert.strictEqual(reset.agentId, "support")
          assert.strictEqual(Option.getOrThrow(yield* journal.getSession(first.session.id)).agentId, "support")
        })
      )
    })
  )

  it.effect("usage routing: past the threshold the cheaper model answers, and the tape says why", () =>
    Effect.gen(function* () {
      const big = ScriptedModel.make(() => ({ text: "thorough", usage: { inputTokens: 500, outputTokens: 100 } }), {
        name: "big"
      })
      const cheap = ScriptedModel.make(() => ({ text: "brief", usage: { inputTokens: 10, outputTokens: 5 } }), {
        name: "cheap"
      })
      yield* withKernel(
        {
          model: unused("kernel"),
          agents: [
            {
              id: "thrifty",
              model: big,
              budgets: { maxTokensPerSession: 1_000 },
              routing: { threshold: 0.5, model: cheap }
            }
          ]
        },
        (gateway) =>
          Effect.gen(function* () {
            const first = yield* gateway.startRun(alice, { text: "q1", key: "s", agent: "thrifty" })
            const before = only(yield* collect(first.events), "ModelRequest")
            const second = yield* gateway.startRun(alice, { text: "q2", key: "s" })
            const after = only(yield* collect(second.events), "ModelRequest")
            assert.deepStrictEqual([big.prompts.length, cheap.prompts.length], [1, 1])
            assert.strictEqual(before[0]!.model, "big")
            assert.deepStrictEqual(
              { ...before[0]!.routing!, reason: undefined },
              {
                agent: "thrifty",
                rule: "primary",
                reason: undefined,
                usedTokens: 0,
                budgetTokens: 1_000,
                thresholdTokens: 500,
                candidates: ["big"],
                attempt: 0
              }
            )
            assert.include(before[0]!.routing!.reason, "under the 50% threshold")
            assert.strictEqual(after[0]!.model, "cheap")
            assert.deepStrictEqual(
              { ...after[0]!.routing!, reason: undefined },
              {
                agent: "thrifty",
                rule: "usage",
                reason: undefined,
                usedTokens: 600,
                budgetTokens: 1_000,
                thresholdTokens: 500,
                candidates: ["cheap"],
                attempt: 0
              }
            )
            assert.include(after[0]!.routing!.reason, "session used 600 of 1000 tokens, at or past the 50% threshold")
          })
      )
    })
  )

  it.effect("fail-over: a model that fails before answering hands the call to the next, on the tape", () =>
    Effect.gen(function* () {
      const broken = ScriptedModel.make(() => ({ fail: { reason: "overloaded", message: "503 from upstream" } }), {
        name: "broken"
      })
      const backup = ScriptedModel.make(() => ({ text: "backup here" }), { name: "backup" })
      yield* withKernel({ model: broken, agents: [{ id: "resilient", model: [broken, backup] }] }, (gateway) =>
        Effect.gen(function* () {
          const { events } = yield* gateway.startRun(alice, { text: "hi", agent: "resilient" })
          const seen = yield* collect(events)
          const requests = only(seen, "ModelRequest")
          assert.deepStrictEqual(
            requests.map((r) => [r.turn, r.model, r.routing?.attempt, r.routing?.candidates]),
            [
              [1, "broken", 0, ["broken", "backup"]],
              [1, "backup", 1, ["broken", "backup"]]
            ]
          )
          assert.include(
            requests[1]!.routing!.reason,
            "broken failed before answering (provider_error: 503 from upstream)"
          )
          assert.strictEqual(only(seen, "AssistantMessage")[0]!.text, "backup here")
          assert.strictEqual(only(seen, "RunStateChanged").at(-1)!.to, "Done")
        })
      )
    })
  )

  it.effect("no fail-over once a model has started answering: the run fails", () =>
    Effect.gen(function* () {
      // Streams a delta, then breaks: its words are on the tape, so another model must not answer.
      const halfway: ModelProvider.Service = {
        name: "halfway",
        stream: () =>
          Stream.make<Array<ModelProvider.ModelEvent>>({ type: "text-delta", text: "Hal" }).pipe(
            Stream.concat(
              Stream.fail(
                new Errors.ProviderError({ provider: "halfway", reason: "network", retryable: true, message: "reset" })
              )
            )
          )
      }
      const backup = ScriptedModel.make(() => ({ text: "never" }), { name: "backup" })
      yield* withKernel({ model: halfway, agents: [{ id: "default", model: [halfway, backup] }] }, (gateway) =>
        Effect.gen(function* () {
          const { events } = yield* gateway.startRun(alice, { text: "hi" })
          const seen = yield* collect(events)
          assert.strictEqual(backup.prompts.length, 0)
          assert.strictEqual(only(seen, "ModelRequest").length, 1)
          assert.strictEqual(only(seen, "RunError")[0]!.code, "provider_error")
          assert.strictEqual(only(seen, "RunStateChanged").at(-1)!.to, "Failed")
        })
      )
    })
  )

  it.effect("bindings pick the agent for a channel conversation; a named agent wins", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "ok" }), { name: "m" })
      yield* withKernel(
        {
          model,
          agents: [{ id: "support" }, { id: "ops" }, { id: "vip" }],
          bindings: [
            { channel: "telegram", agent: "support" },
            { channel: "telegram", conversation: "ops-room", agent: "ops" },
            { channel: "telegram", account: "vip-bot", agent: "vip" }
          ]
        },
        (gateway, _journal, agents) =>
          Effect.gen(function* () {
            const agentOf = (target: Gateway.SessionTarget) =>
              Effect.map(gateway.resolveSession(alice, target), (s) => s.agentId)
            assert.strictEqual(
              yield* agentOf({ channel: "telegram", account: "bot", conversation: "chat-1" }),
              "support"
            )
            assert.strictEqual(yield* agentOf({ channel: "telegram", account: "bot", conversation: "ops-room" }), "ops")
            assert.strictEqual(yield* agentOf({ channel: "telegram", account: "vip-bot", conversation: "c" }), "vip")
            // Conversation is more specific than account.
            assert.strictEqual(
              yield* agentOf({ channel: "telegram", account: "vip-bot", conversation: "ops-room" }),
              "ops"
            )
            assert.strictEqual(yield* agentOf({ channel: "slack", conversation: "ops-room" }), "default")
            assert.strictEqual(yield* agentOf({}), "default")
            assert.strictEqual(
              yield* agentOf({ channel: "telegram", conversation: "ops-room", agent: "support" }),
              "support"
            )
            // The accessor channels use answers the same.
            assert.deepStrictEqual(
              yield* Agents.bindingFor("telegram", "bot", "ops-room").pipe(
                Effect.provideService(Agents.AgentRegistry, agents)
              ),
              Option.some("ops")
            )
            assert.isTrue(Option.isNone(agents.bindingFor("matrix", "bot", "ops-room")))
            // A run on a bound conversation is answered by its agent.
            const sent = yield* gateway.sendMessage(alice, {
              text: "hi",
              key: "tg:ops-room",
              channel: "telegram",
              account: "bot",
              conversation: "ops-room"
            })
            assert.strictEqual(sent.session.agentId, "ops")
            yield* gateway.awaitRun(alice, sent.run.id)
            const tape = yield* gateway.readTape(alice, sent.session.id, { afterSeq: 0 })
            assert.strictEqual(only(tape, "ModelRequest")[0]!.routing!.agent, "ops")
          })
      )
    })
  )

  it.effect("a session whose agent is no longer configured takes no message", () =>
    Effect.gen(function* () {
      const journal = yield* MemoryJournal.make()
      const model = ScriptedModel.make(() => ({ text: "ok" }), { name: "m" })
      const shared = Layer.succeed(Journal.Journal, journal)
      const session = yield* withKernel({ model, journal: shared, agents: [{ id: "legacy" }] }, (gateway) =>
        Effect.map(gateway.resolveSession(alice, { key: "old", agent: "legacy" }), (s) => s.id)
      )
      yield* withKernel({ model, journal: shared }, (gateway) =>
        Effect.gen(function* () {
          const refused = yield* Effect.flip(gateway.sendMessage(alice, { text: "hi", sessionId: session }))
          assert.strictEqual(refused._tag, "Conflict")
          assert.include(refused.message, "agent legacy")
          assert.strictEqual((yield* gateway.listRuns(operator, { sessionId: session })).length, 0)
        })
      )
    })
  )

  it.effect("bad configuration is refused with InvalidArgument naming the problem", () =>
    Effect.gen(function* () {
      const math = recordingTool("math.double", "low")
      const model = ScriptedModel.make([], { name: "m" })
      const refused = (options: Partial<GatewayLayerOptions>) =>
        Effect.gen(function* () {
          return yield* Effect.flip(
            Layer.build(
              gatewayLayer({ model, tools: [math.tool], ...options }) as Layer.Layer<Gateway.Gateway, unknown>
            )
          )
        }).pipe(
          Effect.scoped,
          Effect.map((e) => `${(e as Errors.InvalidArgument)._tag}: ${(e as Error).message}`)
        )
      assert.strictEqual(
        yield* refused({ agents: [{ id: "a", tools: ["math.triple"] }] }),
        'InvalidArgument: agent a: unknown tool "math.triple"'
      )
      assert.strictEqual(
        yield* refused({ agents: [{ id: "a", tools: ["fs.*"] }] }),
        'InvalidArgument: agent a: "fs.*" matches no tool'
      )
      assert.strictEqual(
        yield* refused({ agents: [{ id: "a" }, { id: "a" }] }),
        "InvalidArgument: agent a is configured twice"
      )
      assert.include(yield* refused({ agents: [{ id: "no spaces" }] }), 'agent id "no spaces"')
      assert.include(
        yield* refused({ agents: [{ id: "a", routing: { threshold: 1.5, model } }] }),
        "routing threshold must be a share"
      )
      assert.strictEqual(
        yield* refused({ bindings: [{ channel: "telegram", agent: "ghost" }] }),
        "InvalidArgument: binding for channel telegram: unknown agent ghost"
      )
      assert.include(
        yield* refused({ model: undefined, agents: [{ id: "a", model }] }),
        'configure an agent with id "default"'
      )
    })
  )

  it.effect("an agent configured as default replaces the kernel's, and may stand in for its model", () =>
    Effect.gen(function* () {
      const own = ScriptedModel.make(() => ({ text: "mine" }), { name: "own" })
      const math = recordingTool("math.double", "low")
      yield* withKernel(
        { tools: [math.tool], agents: [{ id: "default", model: own, instructions: "Own.", tools: [] }] },
        (gateway) =>
          Effect.gen(function* () {
            const { events } = yield* gateway.startRun(alice, { text: "hi" })
            yield* collect(events)
            assert.deepStrictEqual(
              own.prompts.map((p) => [p.instructions, p.tools.length]),
              [["Own.", 0]]
            )
            assert.deepStrictEqual(
              (yield* gateway.listAgents(alice)).map((a) => a.id),
              ["default"]
            )
          })
      )
    })
  )
})

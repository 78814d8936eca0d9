import { createHash } from "node:crypto"
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs"
import { createServer as createHttpServer } from "node:http"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import { References } from "../src/context.js"
import {
  Agents,
  Caller,
  Gateway,
  Journal,
  MemoryJournal,
  PolicyEngine,
  PromptAssembler,
  ScriptedModel,
  type TapeEvent,
  Tool
} from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { BuiltinTools } from "../src/tools.js"

const alice = Caller.user("alice")
const bob = Caller.user("bob")
const sha = (s: string) => createHash("sha256").update(s).digest("hex")

/** A workspace with ordinary files, secret files and links that leave it. */
const workspace = () => {
  const base = mkdtempSync(join(tmpdir(), "palyra-refs-"))
  const root = join(base, "ws")
  mkdirSync(join(root, "sub", ".git"), { recursive: true })
  writeFileSync(join(root, "notes.md"), "The build id is B-7731.\n")
  writeFileSync(join(root, "my notes.md"), "spaces work\n")
  writeFileSync(join(root, ".env"), "TOKEN=should-never-leave\n")
  writeFileSync(join(root, "server.pem"), "-----BEGIN PRIVATE KEY-----\n")
  writeFileSync(join(root, "sub", ".git", "config"), "[remote] url=secret-remote\n")
  writeFileSync(join(base, "outside.txt"), "outside-the-workspace\n")
  symlinkSync(join(base, "outside.txt"), join(root, "link-out"))
  symlinkSync(join(root, "sub", ".git", "config"), join(root, "harmless.txt"))
  return root
}

/** The built-in tools references stand for (`fs.read`, `fs.list`, `http.fetch`), registered as palyrad does. */
const refTools = (root = tmpdir()): ReadonlyArray<Tool.AnyTool> => [
  ...BuiltinTools.fsTools({ root }),
  BuiltinTools.httpTool({ allowHosts: [] })
]

/** The support agent's one tool. */
const kbSearch = Tool.make("kb.search", {
  description: "Search the knowledge base.",
  parameters: Schema.Struct({ query: Schema.String }),
  execute: () => Effect.succeed("no results")
})

type Opts = Omit<References.Options, "journal">
/** What the kernel around the references has: its tool catalog, agents, bindings and model script. */
interface KernelOpts {
  readonly tools?: ReadonlyArray<Tool.AnyTool>
  readonly agents?: ReadonlyArray<Agents.Agent>
  readonly bindings?: ReadonlyArray<Agents.Binding>
  readonly script?: ScriptedModel.Script
  /** The kernel's policy engine (default: the built-in rules); references use it unless `options.policy` is given. */
  readonly policy?: PolicyEngine.Service
}
type Kernel = Gateway.Gateway | Agents.AgentRegistry | Tool.ToolRuntime | PolicyEngine.PolicyEngine
/** A real kernel whose prompt assembler resolves references (`References.layer`, as palyrad wires it). */
const withRefs = <A, E>(
  options: Opts,
  body: (
    gateway: Gateway.Service,
    journal: Journal.Service,
    model: ScriptedModel.ScriptedModel
  ) => Effect.Effect<A, E, Kernel>,
  kernel: KernelOpts = {}
) =>
  Effect.gen(function* () {
    const journal = yield* MemoryJournal.make()
    const model = ScriptedModel.make(kernel.script ?? (() => ({ text: "noted" })))
    const layer = gatewayLayer({
      model,
      journal: Layer.succeed(Journal.Journal, journal),
      tools: kernel.tools ?? refTools(options.workspace),
      agents: kernel.agents,
      bindings: kernel.bindings,
      policy: kernel.policy === undefined ? undefined : Layer.succeed(PolicyEngine.PolicyEngine, kernel.policy),
      promptAssembler: References.layer(
        Layer.succeed(PromptAssembler.PromptAssembler, PromptAssembler.fromHistory),
        options
      )
    }) as Layer.Layer<Kernel>
    return yield* Effect.flatMap(Gateway.Gateway, (g) => body(g, journal, model)).pipe(
      Effect.provide(layer),
      Effect.scoped
    )
  })

const send = (
  gateway: Gateway.Service,
  caller: Caller.Caller,
  text: string,
  key = "refs",
  target: Omit<Gateway.SessionTarget, "key"> = {}
) =>
  Effect.gen(function* () {
    const { run, session, events } = yield* gateway.startRun(caller, { ...target, key, text })
    const seen = yield* collect(events)
    return { run, session, seen }
  })

const notes = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.flatMap((e) => (e._tag === "SessionNote" && e.author === "references" ? [e.text] : []))
const lastUser = (model: ScriptedModel.ScriptedModel) => {
  const m = model.prompts.at(-1)!.messages.findLast((m) => m.role === "user")
  return m?.role === "user" ? m.text : ""
}

const cedar = (extra: string) => CedarPolicy.make({ policies: `${CedarPolicy.defaultPolicies}\n${extra}` })
const permitFetch = `@id("refs.alice-fetch")
permit (principal == Palyra::Principal::"alice", action == Palyra::Action::"tool.execute", resource == Palyra::Tool::"http.fetch");`

/** A TCP listener that only counts connections. */
const canary = () =>
  Effect.acquireRelease(
    Effect.async<{ server: Server; port: number; connections: () => number }>((resume) => {
      let n = 0
      const server = createServer((socket) => {
        n++
        socket.destroy()
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        resume(
          Effect.succeed({
            server,
            port: typeof address === "object" && address ? address.port : 0,
            connections: () => n
          })
        )
      })
    }),
    ({ server }) => Effect.promise(() => new Promise<void>((r) => server.close(() => r())))
  )

describe("References", () => {
  it.live("files and folders: confined, secret paths refused, links followed to where they lead, all journaled", () =>
    Effect.gen(function* () {
      const root = workspace()
      const text =
        'compare @file:notes.md with @file:"my notes.md", @file:../outside.txt, @file:link-out, ' +
        "@file:.env, @file:server.pem, @file:sub/.git/config, @file:harmless.txt and @folder:. please"
      yield* withRefs({ workspace: root, modelName: "openai:gpt-4o", maxReferences: 10 }, (gateway, journal, model) =>
        Effect.gen(function* () {
          const { session } = yield* send(gateway, alice, text)
          const prompt = lastUser(model)
          // The content reaches the model fenced after the message, labelled untrusted.
          assert.include(prompt, text)
          assert.include(prompt, `target="notes.md" sha256="${sha("The build id is B-7731.\n")}" untrusted="true">`)
          assert.include(prompt, "The build id is B-7731.")
          assert.include(prompt, "spaces work")
          for (const leaked of ["outside-the-workspace", "should-never-leave", "PRIVATE KEY", "secret-remote"]) {
            assert.notInclude(prompt, leaked)
          }
          // The folder listing hides the secret entries.
          assert.match(
            prompt,
            /kind="folder" target="\."[^>]*>\nharmless.txt\nlink-out\nmy notes.md \(12 bytes\)\nnotes.md \(24 bytes\)\nsub\/\n\(2 secret entries not shown\)\n<\/context-reference>/
          )
          // One note per reference, in order, on the tape — with the digest, not the content.
          const tape = yield* journal.readTape(session.id, { afterSeq: 0 })
          const ns = notes(tape)
          assert.strictEqual(ns.length, 9)
          assert.match(ns[0]!, /^@file:notes\.md resolved: 24 bytes, \d+ tokens, sha256:[0-9a-f]{64}$/)
          assert.match(ns[1]!, /^@file:my notes\.md resolved: 12 bytes/)
          assert.match(ns[2]!, /^@file:\.\.\/outside\.txt refused: .*outside the workspace/)
          assert.match(ns[3]!, /^@file:link-out refused: .*symlink/)
          for (const i of [4, 5, 6, 7]) assert.match(ns[i]!, /refused: secret paths are never referenced$/)
          assert.match(ns[8]!, /^@folder:\. resolved/)
          assert.notInclude(JSON.stringify(tape), "B-7731")
          // The refusals are visible to the model too.
          assert.include(prompt, 'target="../outside.txt" status="refused"')
        })
      )
    })
  )

  it.live(
    "@url: a private address is refused with zero connections; an allowed local server is fetched and digested",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const trap = yield* canary()
          const policy = yield* cedar(permitFetch)
          const body = "release notes: v1.2.3 fixes #42\n"
          const server = createHttpServer((_req, res) => {
            res.writeHead(200, { "content-type": "text/plain; charset=utf-8" })
            res.end(body)
          })
          yield* Effect.acquireRelease(
            Effect.async<void>((resume) => {
              server.listen(0, "127.0.0.1", () => resume(Effect.void))
            }),
            () => Effect.promise(() => new Promise<void>((r) => server.close(() => r())))
          )
          const address = server.address()
          const port = typeof address === "object" && address ? address.port : 0

          // The http.fetch rules: 127.0.0.1 is on the list but private networks are not allowed.
          yield* withRefs({ policy, http: { allowHosts: ["127.0.0.1"] } }, (gateway, journal, model) =>
            Effect.gen(function* () {
              const { session } = yield* send(gateway, alice, `see @url:http://127.0.0.1:${trap.port}/x`)
              const ns = notes(yield* journal.readTape(session.id, { afterSeq: 0 }))
              assert.strictEqual(ns.length, 1)
              assert.match(ns[0]!, /refused: private_address/)
              assert.include(lastUser(model), 'status="refused"')
            })
          )
          // Policy first: with the default policies (http.fetch needs approval) nothing is fetched.
          const strict = yield* cedar("")
          yield* withRefs(
            { policy: strict, http: { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true } },
            (gateway, journal) =>
              Effect.gen(function* () {
                const { session } = yield* send(gateway, alice, `see @url:http://127.0.0.1:${trap.port}/x`)
                const ns = notes(yield* journal.readTape(session.id, { afterSeq: 0 }))
                assert.strictEqual(
                  ns[0],
                  `@url:http://127.0.0.1:${trap.port}/x refused: policy requires approval for http.fetch here (use the http.fetch tool instead)`
                )
              })
          )
          // ... and bob has no permit at all.
          yield* withRefs(
            { policy, http: { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true } },
            (gateway, journal) =>
              Effect.gen(function* () {
                const { session } = yield* send(gateway, bob, `see @url:http://127.0.0.1:${trap.port}/x`)
                const ns = notes(yield* journal.readTape(session.id, { afterSeq: 0 }))
                assert.match(ns[0]!, /refused: policy (denies|requires approval)/)
              })
          )
          assert.strictEqual(trap.connections(), 0, "nothing connected to the canary")

          // A test config that allows the local server: fetched, fenced, digested.
          yield* withRefs(
            { policy, http: { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true } },
            (gateway, journal, model) =>
              Effect.gen(function* () {
                const { session } = yield* send(gateway, alice, `summarize @url:http://127.0.0.1:${port}/notes`)
                const ns = notes(yield* journal.readTape(session.id, { afterSeq: 0 }))
                assert.strictEqual(
                  ns[0],
                  `@url:http://127.0.0.1:${port}/notes resolved: ${body.length} bytes, ${ns[0]!.match(/(\d+) tokens/)![1]} tokens, sha256:${sha(body)}`
                )
                assert.include(lastUser(model), "release notes: v1.2.3 fixes #42")
              })
          )
        })
      )
  )

  it.live("@run: and @session: read the caller's own; another principal's answer exactly like a missing id", () =>
    withRefs({}, (gateway, journal, model) =>
      Effect.gen(function* () {
        const mine = yield* send(gateway, alice, "the password rotation is due on 2026-12-01", "a1")
        const theirs = yield* send(gateway, bob, "bob's private plan: ZEBRA-9", "b1")
        const missing = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
        const { session } = yield* send(
          gateway,
          alice,
          `@run:${mine.run.id} @run:${theirs.run.id} @run:${missing} @session:${theirs.session.id} @session:${mine.session.id}`,
          "a2"
        )
        const ns = notes(yield* journal.readTape(session.id, { afterSeq: 0 }))
        assert.match(ns[0]!, /^@run:\S+ resolved/)
        assert.strictEqual(ns[1], `@run:${theirs.run.id} refused: run ${theirs.run.id} not found`)
        assert.strictEqual(ns[2], `@run:${missing} refused: run ${missing} not found`)
        assert.strictEqual(ns[3], `@session:${theirs.session.id} refused: session ${theirs.session.id} not found`)
        assert.match(ns[4]!, /^@session:\S+ resolved/)
        const prompt = lastUser(model)
        assert.include(prompt, "user: the password rotation is due on 2026-12-01")
        assert.notInclude(prompt, "ZEBRA-9")
      })
    )
  )

  it.live("limits: a reference over its kind's limit is cut; one past the total is refused", () =>
    Effect.gen(function* () {
      const root = workspace()
      writeFileSync(join(root, "big.txt"), "lorem ipsum dolor sit amet ".repeat(2_000))
      yield* withRefs(
        { workspace: root, modelName: "openai:gpt-4o", limits: { file: 100, total: 150 } },
        (gateway, journal) =>
          Effect.gen(function* () {
            const { session } = yield* send(gateway, alice, "@file:big.txt @file:big.txt")
            const ns = notes(yield* journal.readTape(session.id, { afterSeq: 0 }))
            const tokens = Number(ns[0]!.match(/(\d+) tokens/)![1])
            assert.isAtMost(tokens, 100)
            assert.include(ns[0]!, "(truncated)")
            assert.match(ns[1]!, /resolved: .*\(truncated\)/)
            assert.isAtMost(Number(ns[1]!.match(/(\d+) tokens/)![1]), 50)
          })
      )
    })
  )

  it.live(
    "through the kernel (References.layer): the notes reach the run's live stream, @url decided by the kernel's policy",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        const model = ScriptedModel.make(() => ({ text: "noted" }))
        const layer = gatewayLayer({
          model,
          tools: refTools(root),
          policy: Layer.effect(PolicyEngine.PolicyEngine, cedar("")),
          promptAssembler: References.layer(PromptAssembler.layer, { workspace: root, http: { allowHosts: [] } })
        }) as Layer.Layer<Gateway.Gateway>
        const seen = yield* Effect.flatMap(Gateway.Gateway, (g) =>
          send(g, alice, "@file:notes.md @url:https://example.com/")
        ).pipe(Effect.provide(layer), Effect.scoped)
        const live = notes(seen.seen)
        assert.strictEqual(live.length, 2)
        assert.match(live[0]!, /^@file:notes\.md resolved/)
        // The default Cedar policies want approval for http.fetch: a prompt cannot wait, so it is refused.
        assert.match(live[1]!, /refused: policy requires approval/)
      })
  )

  it.live("a new process resolving the same run again (a resume) does not note its references twice", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* withRefs({ workspace: root }, (gateway, journal) =>
        Effect.gen(function* () {
          const { session, run } = yield* send(gateway, alice, "see @file:notes.md")
          const history = yield* journal.readTape(session.id, { afterSeq: 0 })
          // A fresh decorator: nothing cached, as after a restart (the kernel's gates, as the layer gives them).
          const again = References.resolving(PromptAssembler.fromHistory, {
            journal,
            workspace: root,
            agents: yield* Agents.AgentRegistry,
            tools: yield* Tool.ToolRuntime,
            policy: yield* PolicyEngine.PolicyEngine
          })
          const out = yield* again.assemble({ session, runId: run.id, history, instructions: undefined, tools: [] })
          const user = out.request.messages.findLast((m) => m.role === "user")
          assert.include(user?.role === "user" ? user.text : "", "The build id is B-7731.")
          assert.strictEqual(notes(yield* journal.readTape(session.id, { afterSeq: 0 })).length, 1)
        })
      )
    })
  )

  it.live(
    "an agent without fs.read / fs.list (bound to a chat channel) is refused @file: and @folder:, and the content never reaches the prompt; permitted agents still read",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        const attack = "@folder:. then quote verbatim: @file:notes.md"
        yield* withRefs(
          { workspace: root },
          (gateway, journal, model) =>
            Effect.gen(function* () {
              // A paired chat user lands on the channel's agent, whose tools are the knowledge base only.
              const { session } = yield* send(gateway, alice, attack, "chat", { channel: "slack" })
              assert.strictEqual(session.agentId, "support")
              const prompt = lastUser(model)
              assert.notInclude(prompt, "B-7731")
              assert.notInclude(prompt, "notes.md (24 bytes)")
              assert.include(
                prompt,
                '<context-reference kind="file" target="notes.md" status="refused">agent support may not use the fs.read tool</context-reference>'
              )
              assert.deepStrictEqual(notes(yield* journal.readTape(session.id, { afterSeq: 0 })), [
                "@folder:. refused: agent support may not use the fs.list tool",
                "@file:notes.md refused: agent support may not use the fs.read tool"
              ])
              // An agent with fs.read only: the file, not the folder.
              const reader = yield* send(gateway, alice, attack, "reader", { agent: "reader" })
              assert.include(lastUser(model), "The build id is B-7731.")
              const readerNotes = notes(yield* journal.readTape(reader.session.id, { afterSeq: 0 }))
              assert.strictEqual(readerNotes[0], "@folder:. refused: agent reader may not use the fs.list tool")
              assert.match(readerNotes[1]!, /^@file:notes\.md resolved: 24 bytes/)
              // The default agent may use every registered tool: both resolve (the regression).
              yield* send(gateway, alice, attack, "default")
              assert.include(lastUser(model), "The build id is B-7731.")
              assert.include(lastUser(model), "notes.md (24 bytes)")
            }),
          {
            tools: [...refTools(root), kbSearch],
            agents: [
              { id: "support", tools: ["kb.*"] },
              { id: "reader", tools: ["fs.read"] }
            ],
            bindings: [{ channel: "slack", agent: "support" }]
          }
        )
        // A tool the kernel does not have cannot be reached through a reference, even by the default agent.
        yield* withRefs(
          { workspace: root },
          (gateway, journal, model) =>
            Effect.gen(function* () {
              const { session } = yield* send(gateway, alice, "@file:notes.md")
              assert.deepStrictEqual(notes(yield* journal.readTape(session.id, { afterSeq: 0 })), [
                "@file:notes.md refused: the fs.read tool is not available"
              ])
              assert.notInclude(lastUser(model), "B-7731")
            }),
          { tools: [BuiltinTools.httpTool({ allowHosts: [] })] }
        )
      })
  )

  it.live(
    "a Cedar forbid on fs.read for an agent refuses its @file: and @folder: exactly as it denies the tool call",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        const policy = yield* cedar(`@id("refs.support-no-fs")
forbid (principal, action, resource is Palyra::Tool)
when { context.agent == "support" && resource.category == "fs.read" };`)
        yield* withRefs(
          { workspace: root },
          (gateway, journal, model) =>
            Effect.gen(function* () {
              const { session } = yield* send(gateway, alice, "quote @file:notes.md and @folder:.", "s", {
                agent: "support"
              })
              const tape = yield* journal.readTape(session.id, { afterSeq: 0 })
              assert.deepStrictEqual(notes(tape), [
                "@file:notes.md refused: policy denies fs.read here (use the fs.read tool instead)",
                "@folder:. refused: policy denies fs.list here (use the fs.list tool instead)"
              ])
              const first = model.prompts[0]!.messages.findLast((m) => m.role === "user")
              assert.notInclude(first?.role === "user" ? first.text : "", "B-7731")
              // The same request through the loop: the model's own fs.read call is denied by the same policy.
              const decided = tape.filter((e) => e._tag === "PolicyDecided")
              assert.deepStrictEqual(
                decided.map((e) => [e.tool, e.decision, e.policyIds]),
                [["fs.read", "deny", ["refs.support-no-fs"]]]
              )
              assert.notInclude(JSON.stringify(tape), "B-7731")
              // Another agent under the same policy reads the file.
              const other = yield* send(gateway, alice, "quote @file:notes.md", "o", { agent: "ops" })
              assert.match(
                notes(yield* journal.readTape(other.session.id, { afterSeq: 0 }))[0]!,
                /^@file:notes\.md resolved/
              )
              assert.include(lastUser(model), "The build id is B-7731.")
            }),
          {
            policy,
            agents: [
              { id: "support", tools: ["*"] },
              { id: "ops", tools: ["*"] }
            ],
            // The support session's model tries the tool itself once; everything else just answers.
            script: (request) =>
              request.messages.some((m) => m.role === "tool") ||
              !request.messages.some((m) => m.role === "user" && m.text.startsWith("quote @file:notes.md and"))
                ? { text: "noted" }
                : { toolCalls: [{ name: "fs.read", args: { path: "notes.md" } }] }
          }
        )
      })
  )

  it.live(
    "@url: is decided with the session's channel: a forbid on channel slack refuses it there with zero requests",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          let requests = 0
          const body = "channel-scoped page\n"
          const server = createHttpServer((_req, res) => {
            requests++
            res.writeHead(200, { "content-type": "text/plain" })
            res.end(body)
          })
          yield* Effect.acquireRelease(
            Effect.async<void>((resume) => {
              server.listen(0, "127.0.0.1", () => resume(Effect.void))
            }),
            () => Effect.promise(() => new Promise<void>((r) => server.close(() => r())))
          )
          const address = server.address()
          const port = typeof address === "object" && address ? address.port : 0
          const policy = yield* cedar(`${permitFetch}
@id("refs.no-fetch-from-slack")
forbid (principal, action, resource == Palyra::Tool::"http.fetch")
when { context.channel == "slack" };`)
          const target = `http://127.0.0.1:${port}/page`
          yield* withRefs(
            { policy, http: { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true } },
            (gateway, journal, model) =>
              Effect.gen(function* () {
                const slack = yield* send(gateway, alice, `read @url:${target}`, "s", { channel: "slack" })
                assert.strictEqual(slack.session.channel, "slack")
                assert.deepStrictEqual(notes(yield* journal.readTape(slack.session.id, { afterSeq: 0 })), [
                  `@url:${target} refused: policy denies http.fetch here (use the http.fetch tool instead)`
                ])
                assert.notInclude(lastUser(model), "channel-scoped page")
                assert.strictEqual(requests, 0, "nothing was fetched for the slack session")
                // The same user and URL from another channel: fetched.
                const web = yield* send(gateway, alice, `read @url:${target}`, "w", { channel: "web" })
                assert.match(notes(yield* journal.readTape(web.session.id, { afterSeq: 0 }))[0]!, /resolved: 20 bytes/)
                assert.include(lastUser(model), "channel-scoped page")
                assert.strictEqual(requests, 1)
              })
          )
        })
      )
  )

  it("the secret-path list", () => {
    for (const p of [
      ".git/config",
      "a/.ssh/id_rsa",
      ".env",
      ".env.local",
      "k.pem",
      "x/tls.KEY",
      "id_ed25519.pub",
      ".aws/credentials",
      ".npmrc",
      ".netrc"
    ]) {
      assert.isTrue(References.secretPath(p), p)
    }
    for (const p of ["src/env.ts", "notes.md", "keys/README.md", "environment.txt", "a.keynote"]) {
      assert.isFalse(References.secretPath(p), p)
    }
  })
})

import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, type Records, RunHooks, ScriptedModel } from "@palyra/core"
import { AfterRun, Background } from "@palyra/core/memory"
import { gatewayLayer } from "@palyra/core/testing"
import { Deferred, Effect, Layer, Schedule } from "effect"
import { SqliteJournal, SqliteMemoryStore, SqliteTaskQueue } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-afterrun-"))
let files = 0
const fresh = () => join(dir, `palyra-${files++}.db`)

const waitFor = <A, E, R>(effect: Effect.Effect<A, E, R>, ok: (a: A) => boolean) =>
  effect.pipe(
    Effect.filterOrFail(ok, () => "not yet" as const),
    Effect.retry(Schedule.spaced("25 millis")),
    Effect.timeout("15 seconds")
  )

describe("run-end hooks", () => {
  it.live(
    "a hook hears of every terminal run with its principal; a slow or failing hook neither delays nor fails it",
    () =>
      Effect.gen(function* () {
        const ended: Array<{ readonly run: Records.Run; readonly principal: string }> = []
        const release = yield* Deferred.make<void>()
        const hooks = RunHooks.all([
          // Slow: blocks until released. The run's end must not wait for it.
          { onRunEnd: () => Deferred.await(release) },
          { onRunEnd: () => Effect.fail("this hook always fails") },
          { onRunEnd: (end) => Effect.sync(() => ended.push({ run: end.run, principal: end.caller.principal })) }
        ])
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const alice = Caller.user("alice")
          const { run } = yield* gateway.sendMessage(alice, { key: "a", text: "hello" })
          const done = yield* gateway.awaitRun(alice, run.id).pipe(Effect.timeout("5 seconds"))
          assert.strictEqual(done.state, "Done")
          // The slow hook is still blocked, and the third has not run yet (hooks run in turn).
          assert.deepStrictEqual(ended, [])
          yield* Deferred.succeed(release, undefined)
          yield* waitFor(
            Effect.sync(() => ended.length),
            (n) => n === 1
          )
          assert.strictEqual(ended[0]!.run.id, run.id)
          assert.strictEqual(ended[0]!.run.state, "Done")
          assert.strictEqual(ended[0]!.principal, "alice")
          // A cancelled run is terminal too.
          const second = yield* gateway.sendMessage(alice, { key: "b", text: "hang" })
          yield* gateway.cancelRun(alice, second.run.id)
          yield* waitFor(
            Effect.sync(() => ended.map((e) => e.run.id)),
            (ids) => ids.includes(second.run.id)
          )
          assert.strictEqual(ended.find((e) => e.run.id === second.run.id)!.run.state, "Cancelled")
          // A run cancelled while queued (it never started) is terminal too.
          const blocker = yield* gateway.sendMessage(alice, { key: "c", text: "hang" })
          const queued = yield* gateway.sendMessage(alice, { key: "c", text: "after the hang" })
          assert.strictEqual(queued.run.state, "Accepted")
          yield* gateway.cancelRun(alice, queued.run.id)
          yield* waitFor(
            Effect.sync(() => ended.map((e) => e.run.id)),
            (ids) => ids.includes(queued.run.id)
          )
          assert.strictEqual(ended.find((e) => e.run.id === queued.run.id)!.run.state, "Cancelled")
          yield* gateway.cancelRun(alice, blocker.run.id)
        }).pipe(
          Effect.provide(
            gatewayLayer({
              model: ScriptedModel.make((request) =>
                request.messages.some((m) => m.role === "user" && m.text === "hang")
                  ? { text: ["never", "ends"], delayPerDelta: "1 hour" }
                  : { text: "hi" }
              ),
              runHooks: hooks
            })
          ),
          Effect.scoped
        )
      })
  )
})

describe("AfterRun", () => {
  it.live(
    "switched on, a finished run is reflected by the worker on its own; candidates, tasks and memory are authorized in core; memory reaches a later session's prompt",
    () =>
      Effect.gen(function* () {
        const filename = fresh()
        const store = yield* SqliteMemoryStore.make({ filename })
        const queue = yield* SqliteTaskQueue.make({ filename })
        const model = ScriptedModel.make(() => ({ text: "Noted." }))
        const afterRun = AfterRun.make({
          store,
          queue,
          memory: { tokenBudget: 300 },
          learning: { extractor: "deterministic" },
          watchdog: { mode: "observe", interval: "1 hour" },
          worker: { pollInterval: "20 millis" }
        })
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const background = yield* Background.Background
          const alice = Caller.user("alice")
          const bob = Caller.user("bob")
          const admin = Caller.operator("admin")
          const { run } = yield* gateway.sendMessage(alice, {
            key: "a1",
            text: "Remember that the staging database listens on port 5433. I usually deploy on Fridays."
          })
          assert.strictEqual((yield* gateway.awaitRun(alice, run.id)).state, "Done")

          // Nobody enqueued anything: the run-end hook did, and the worker ran it.
          const tasks = yield* waitFor(background.listTasks(admin), (ts) =>
            ts.some((t) => t.kind === "memory.reflect" && t.state === "succeeded")
          )
          assert.deepStrictEqual((tasks[0]!.payload as { runId: string }).runId, run.id)
          assert.strictEqual((yield* Effect.flip(background.listTasks(alice)))._tag, "PermissionDenied")
          assert.strictEqual((yield* Effect.flip(background.cancelTask(alice, tasks[0]!.id)))._tag, "NotFound")

          // One applied by threshold, one pending.
          const [fact] = yield* background.searchMemory(alice, { text: "staging database" })
          assert.strictEqual(fact!.item.text, "The staging database listens on port 5433")
          const pending = yield* background.listCandidates(alice)
          assert.deepStrictEqual(
            pending.map((c) => [c.text, c.confidenceBps]),
            [["The user usually deploy on Fridays", 6_000]]
          )
          // Not bob's: he sees nothing, and deciding or forgetting it answers NotFound.
          assert.deepStrictEqual(yield* background.listCandidates(bob), [])
          assert.deepStrictEqual(yield* background.searchMemory(bob, { text: "staging database" }), [])
          assert.strictEqual(
            (yield* Effect.flip(background.decideCandidate(bob, pending[0]!.id, "accept")))._tag,
            "NotFound"
          )
          assert.strictEqual((yield* Effect.flip(background.forgetMemory(bob, fact!.item.id)))._tag, "NotFound")
          assert.strictEqual((yield* background.listCandidates(admin)).length, 1)
          const accepted = yield* background.decideCandidate(alice, pending[0]!.id, "accept")
          assert.strictEqual(accepted.candidate.status, "accepted")

          // Session B of alice: the fact is in the prompt, fenced; bob's session never sees it.
          yield* gateway.awaitRun(
            alice,
            (yield* gateway.sendMessage(alice, { key: "a2", text: "Which port does staging database use?" })).run.id
          )
          yield* gateway.awaitRun(
            bob,
            (yield* gateway.sendMessage(bob, { key: "b1", text: "Which port does staging database use?" })).run.id
          )
          const [, toAlice, toBob] = model.prompts.filter((p) =>
            p.messages.some((m) => m.role === "user" && m.text.includes("staging"))
          )
          assert.include(JSON.stringify(toAlice!.messages[0]), "The staging database listens on port 5433")
          assert.include(JSON.stringify(toAlice!.messages[0]), '<memory untrusted=\\"true\\">')
          assert.notInclude(JSON.stringify(toBob!.messages), "5433")
          // The memory tools are in the tool set.
          assert.includeMembers(
            toAlice!.tools.map((t) => t.name),
            ["memory.search", "memory.save"]
          )
          // Forgetting is the owner's.
          yield* background.forgetMemory(alice, fact!.item.id)
          assert.deepStrictEqual(yield* background.searchMemory(alice, { text: "staging database port 5433" }), [])
          assert.deepStrictEqual(yield* background.incidents(admin), [])
          assert.strictEqual((yield* Effect.flip(background.incidents(alice)))._tag, "PermissionDenied")
        }).pipe(
          Effect.provide(
            afterRun.layer.pipe(
              Layer.provideMerge(
                gatewayLayer({ model, journal: SqliteJournal.layer({ filename }), ...afterRun.kernel({}) })
              )
            )
          ),
          Effect.scoped
        )
      }).pipe(Effect.scoped)
  )

  it.effect("a feature that is not switched on answers NotFound (feature)", () =>
    Effect.gen(function* () {
      const background = Background.make({})
      const error = yield* Effect.flip(background.listCandidates(Caller.operator("admin")))
      assert.strictEqual(error._tag, "NotFound")
      assert.strictEqual(error.message, "feature learning not found")
    })
  )

  it.scoped(
    "with neither learning nor auto-ingest there is no run-end hook; the kernel's own hooks stay as given",
    () =>
      Effect.gen(function* () {
        const store = yield* SqliteMemoryStore.make({ filename: fresh() })
        const own: RunHooks.Service = { onRunEnd: () => Effect.void }
        const quiet = AfterRun.make({ store, memory: { autoIngest: false } })
        assert.strictEqual(quiet.kernel({}).runHooks, RunHooks.none)
        assert.strictEqual(quiet.options({ runHooks: own } as never).runHooks, own)
        // Either feature on: a hook that is not `none` (it runs at every run's end).
        const ingesting = AfterRun.make({ store, memory: { autoIngest: true } })
        assert.notStrictEqual(ingesting.kernel({}).runHooks, RunHooks.none)
        assert.notStrictEqual(ingesting.options({ runHooks: own } as never).runHooks, own)
        assert.notStrictEqual(AfterRun.make({ store, learning: {} }).kernel({}).runHooks, RunHooks.none)
      })
  )
})

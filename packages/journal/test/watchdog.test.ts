import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, Journal, type Records, ScriptedModel, type TapeEvent, Tool } from "@palyra/core"
import { Watchdog } from "@palyra/core/memory"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Processes, Sandbox } from "@palyra/core/tools"
import Database from "better-sqlite3"
import { Effect, Layer, Metric, Option, Schedule, Schema } from "effect"
import { SqliteJournal, SqliteTaskQueue } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-watchdog-"))
let files = 0
const fresh = () => join(dir, `watchdog-${files++}.db`)
const op = Caller.operator("op")

/** Poll (with a real delay) until `f` yields a value that passes `ok`. */
const until = <A, E, R>(f: Effect.Effect<A, E, R>, ok: (a: A) => boolean) =>
  f.pipe(
    Effect.filterOrFail(ok),
    Effect.retry(Schedule.spaced("20 millis")),
    Effect.timeout("10 seconds"),
    Effect.orDie
  )

const notes = (tape: ReadonlyArray<TapeEvent.TapeEvent>, author: string) =>
  tape.flatMap((e) => (e._tag === "SessionNote" && e.author === author ? [e.text] : []))

/** Whether a process runs: gone, or a zombie (dead, waiting for an init here that does not reap), is not. */
const running = (pid: number) => {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z"
  } catch {
    return false
  }
}
const leftBehind: Array<number> = []
const killLeftBehind = () => {
  for (const pid of leftBehind.splice(0)) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // gone
    }
  }
}

const openGauge = Effect.map(Metric.value(Watchdog.incidentsOpen), (s) => s.value)

describe("watchdog", () => {
  it.live("a run stuck in a tool that never returns raises an incident; in auto mode it is cancelled", () =>
    Effect.gen(function* () {
      let interrupted = false
      const hang = Tool.make("hang", {
        description: "never returns",
        parameters: Schema.Struct({}),
        risk: "low",
        timeout: "1 hour",
        execute: () =>
          Effect.never.pipe(
            Effect.onInterrupt(() =>
              Effect.sync(() => {
                interrupted = true
              })
            )
          )
      })
      const filename = fresh()
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const journal = yield* Journal.Journal
        const alice = Caller.user("alice")
        const { run } = yield* gateway.sendMessage(alice, { text: "please hang" })
        yield* until(gateway.readTape(alice, run.sessionId, { afterSeq: 0 }), (t) =>
          t.some((e) => e._tag === "ToolStarted")
        )
        // Real time, with room for a loaded machine between the tool starting and the first check.
        const observe = yield* Watchdog.make({ gateway, journal }, { mode: "observe", runStallAfter: "1 second" })
        assert.deepStrictEqual(yield* observe.check, []) // not stalled yet
        yield* Effect.sleep("1200 millis")
        const [incident] = yield* observe.check
        assert.strictEqual(incident?.kind, "run_stalled")
        assert.strictEqual(incident?.subject, run.id)
        assert.strictEqual(incident?.action, "none")
        assert.match(incident!.detail, /made no progress for \d+s( \d+ms)? \(limit 1s\)/)
        assert.deepStrictEqual(yield* observe.check, []) // one open incident per subject
        assert.strictEqual((yield* gateway.getRun(alice, run.id)).state, "InProgress")
        assert.strictEqual(yield* openGauge, 1)
        assert.strictEqual((yield* Effect.flip(observe.incidents(alice)))._tag, "PermissionDenied")

        // A watchdog in auto mode (e.g. after a restart) reloads the incident and remediates it.
        const auto = yield* Watchdog.make({ gateway, journal }, { mode: "auto", runStallAfter: "1 second" })
        const [reloaded] = yield* auto.incidents(op)
        assert.deepStrictEqual(reloaded, incident)
        yield* auto.check
        const ended = yield* gateway.awaitRun(alice, run.id)
        assert.strictEqual(ended.state, "Cancelled")
        assert.isTrue(interrupted)
        const tape = yield* gateway.readTape(alice, run.sessionId, { afterSeq: 0 })
        const [why] = notes(tape, "watchdog")
        assert.include(why!, `watchdog: run ${run.id} made no progress`)
        assert.include(why!, "cancelling it")
        const cancelled = tape.find((e) => e._tag === "RunStateChanged" && e.to === "Cancelled")
        assert.include(cancelled?._tag === "RunStateChanged" ? cancelled.reason : "", "system:watchdog")
        assert.strictEqual((yield* auto.incidents(op, { state: "open" }))[0]?.action, "cancelled")
        yield* auto.check // the run ended: resolved
        const [resolved] = yield* auto.incidents(op)
        assert.strictEqual(resolved?.state, "resolved")
        assert.strictEqual(yield* openGauge, 0)
        // The incident log is a system session's tape: opened, acted on, resolved.
        const [log] = yield* gateway.listSessions(op, { principal: "system:watchdog" })
        const logged = notes(yield* gateway.readTape(op, log!.id, { afterSeq: 0 }), "watchdog")
        assert.deepStrictEqual(
          logged.map((t) => t.slice(0, t.indexOf(":"))),
          ["incident opened", "incident acted on", "incident resolved"]
        )
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make([{ toolCalls: [{ name: "hang" }] }, { text: "never" }]),
            tools: [hang],
            journal: SqliteJournal.layer({ filename })
          })
        ),
        Effect.scoped
      )
    })
  )

  it.live("a task whose worker stopped heartbeating is an incident; auto mode requeues it", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const queue = yield* SqliteTaskQueue.make({ filename })
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const journal = yield* Journal.Journal
        const task = yield* queue.enqueue({ kind: "compact" })
        yield* queue.claim({ kind: "compact", owner: "gone", lease: "1 second" })
        const observe = yield* Watchdog.make({ gateway, journal, queue }, { mode: "observe" })
        assert.deepStrictEqual(yield* observe.check, [])
        yield* Effect.sleep("1200 millis")
        const [incident] = yield* observe.check
        assert.strictEqual(incident?.kind, "task_lease_expired")
        assert.include(incident!.detail, "its worker (gone) stopped heartbeating")
        assert.strictEqual(Option.getOrThrow(yield* queue.get(task.id)).state, "running")
        const auto = yield* Watchdog.make({ gateway, journal, queue }, { mode: "auto" })
        yield* auto.check
        const requeued = Option.getOrThrow(yield* queue.get(task.id))
        assert.strictEqual(requeued.state, "queued")
        const [after] = yield* auto.incidents(op)
        assert.strictEqual(after?.action, "requeued")
        assert.strictEqual(after?.state, "resolved")
        assert.deepStrictEqual(
          (yield* queue.log(task.id)).map((e) => [e.event, e.owner]),
          [
            ["enqueued", null],
            ["claimed", "gone"],
            ["lease_lost", "gone"],
            ["requeued", "system:watchdog"]
          ]
        )
      }).pipe(
        Effect.provide(gatewayLayer({ model: ScriptedModel.make([]), journal: SqliteJournal.layer({ filename }) })),
        Effect.scoped
      )
    }).pipe(Effect.scoped)
  )

  it.live("an approval pending past the warning time is an incident; auto mode asks the approvers on the tape", () =>
    Effect.gen(function* () {
      const write = Tool.make("fs.write", {
        description: "write",
        parameters: Schema.Struct({}),
        risk: "sensitive",
        execute: () => Effect.succeed("written")
      })
      const filename = fresh()
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const journal = yield* Journal.Journal
        const alice = Caller.user("alice")
        const started = yield* gateway.startRun(alice, { text: "write it" })
        yield* Effect.fork(collect(started.events))
        const [pending] = yield* until(gateway.listApprovals(alice, { status: "pending" }), (l) => l.length > 0)
        const watchdog = yield* Watchdog.make(
          { gateway, journal },
          // Real time: the warning threshold leaves a loaded machine room between the approval
          // appearing and the first check (100 ms was overrun once in CI).
          { mode: "auto", approvalWarnAfter: "2 seconds", runStallAfter: "1 hour" }
        )
        assert.deepStrictEqual(yield* watchdog.check, [])
        yield* Effect.sleep("2100 millis")
        const [incident] = yield* watchdog.check
        assert.strictEqual(incident?.kind, "approval_pending")
        assert.strictEqual(incident?.action, "notified")
        const tape = yield* gateway.readTape(alice, started.session.id, { afterSeq: 0 })
        assert.include(notes(tape, "watchdog")[0]!, `approval ${pending!.id} for fs.write`)
        assert.include(notes(tape, "watchdog")[0]!, "Approvers: please approve or deny it.")
        yield* gateway.resolveApproval(alice, { approvalId: pending!.id, decision: "approve" })
        assert.strictEqual((yield* gateway.awaitRun(alice, started.run.id)).state, "Done")
        yield* watchdog.check
        assert.deepStrictEqual(yield* watchdog.incidents(op, { state: "open" }), [])
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make([{ toolCalls: [{ name: "fs.write" }] }, { text: "done" }]),
            tools: [write],
            journal: SqliteJournal.layer({ filename })
          })
        ),
        Effect.scoped
      )
    })
  )

  it.live("a journal append that stalls on a lock is an incident, resolved once appends are fast again", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const probe = Watchdog.makeProbe()
      const journalLayer = Layer.effect(Journal.Journal, Effect.map(Journal.Journal, probe.wrap)).pipe(
        Layer.provide(SqliteJournal.layer({ filename, busyTimeoutMs: 300 }))
      )
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const journal = yield* Journal.Journal
        const watchdog = yield* Watchdog.make({ gateway, journal, probe }, { journalStallAfter: "100 millis" })
        assert.deepStrictEqual(yield* watchdog.check, [])
        const session: Records.Session = yield* gateway.resolveSession(Caller.user("alice"), { key: "k" })
        const note = journal.append(session.id, [
          { _tag: "SessionNote", sessionId: session.id, runId: null, at: Date.now(), author: "test", text: "hello" }
        ])
        // Another connection holds the write lock: the journal's writer waits for it (busy_timeout).
        const other = new Database(filename)
        other.exec("BEGIN IMMEDIATE")
        const blocked = yield* Effect.either(note)
        other.exec("ROLLBACK")
        other.close()
        assert.isTrue(blocked._tag === "Left" && blocked.left._tag === "JournalError")
        const [incident] = yield* watchdog.check
        assert.strictEqual(incident?.kind, "journal_stall")
        assert.match(incident!.detail, /a journal append took \d+ms \(limit 100ms\)/)
        yield* note
        yield* watchdog.check
        assert.deepStrictEqual(yield* watchdog.incidents(op, { state: "open" }), [])
      }).pipe(Effect.provide(gatewayLayer({ model: ScriptedModel.make([]), journal: journalLayer })), Effect.scoped)
    })
  )

  it.live("a tool process group left running after its call is an incident; auto mode kills the whole group", () =>
    Effect.gen(function* () {
      const registry = Processes.make()
      let leftPid = 0
      // A careless tool: it starts `sleep` in the background of its own process group and returns.
      const careless = Tool.make("careless", {
        description: "leaves a process behind",
        parameters: Schema.Struct({}),
        risk: "low",
        execute: (_args, context) =>
          Effect.async<number>((resume) => {
            const child = spawn("sh", ["-c", "sleep 300 >/dev/null 2>&1 & echo $!"], {
              detached: true,
              stdio: ["ignore", "pipe", "ignore"]
            })
            let out = ""
            child.stdout.on("data", (c: Buffer) => {
              out += c.toString("utf8")
            })
            child.on("close", () => resume(Effect.succeed(Number(out.trim()))))
            const release = registry.unsafeTrack(child.pid!, { tool: "careless", ...context })
            child.on("exit", () => setImmediate(release))
          }).pipe(
            Effect.map((pid) => {
              leftPid = pid
              leftBehind.push(pid)
              return `started ${pid}`
            })
          )
      })
      const filename = fresh()
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const journal = yield* Journal.Journal
        const alice = Caller.user("alice")
        const { run } = yield* gateway.sendMessage(alice, { text: "start something" })
        assert.strictEqual((yield* gateway.awaitRun(alice, run.id)).state, "Done")
        assert.isTrue(running(leftPid), "the background sleep outlived its tool call")
        const [group] = yield* registry.live
        assert.strictEqual(group?.runId, run.id)
        assert.isNotNull(group?.callEndedAt)

        const observe = yield* Watchdog.make({ gateway, journal, processes: registry }, { mode: "observe" })
        const [incident] = yield* observe.check
        assert.strictEqual(incident?.kind, "tool_process_orphaned")
        assert.strictEqual(incident?.subject, `pgid:${group!.pgid}`)
        assert.strictEqual(incident?.sessionId, run.sessionId)
        assert.strictEqual(incident?.action, "none")
        assert.match(
          incident!.detail,
          /process group \d+ of careless \(call .+\) in run .+ is still running .+ after its tool call ended/
        )
        assert.isTrue(running(leftPid), "observe mode leaves it alone")

        const auto = yield* Watchdog.make({ gateway, journal, processes: registry }, { mode: "auto" })
        assert.deepStrictEqual(yield* auto.check, []) // the open incident is acted on, not opened again
        assert.isFalse(running(leftPid), "auto mode killed the group")
        assert.strictEqual((yield* auto.incidents(op, { state: "open" }))[0]?.action, "killed")
        const tape = yield* gateway.readTape(alice, run.sessionId, { afterSeq: 0 })
        assert.match(notes(tape, "watchdog")[0] ?? "", /killed the process group$/)
        yield* auto.check // the group is gone: resolved
        assert.deepStrictEqual(yield* auto.incidents(op, { state: "open" }), [])
        assert.deepStrictEqual(yield* registry.live, [])
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make([{ toolCalls: [{ name: "careless" }] }, { text: "started" }]),
            tools: [careless],
            journal: SqliteJournal.layer({ filename })
          })
        ),
        Effect.scoped
      )
    }).pipe(Effect.ensuring(Effect.sync(() => killLeftBehind())))
  )

  it.live(
    "a tracked group whose number another process holds now is dropped: auto mode never reports or kills it",
    () =>
      Effect.gen(function* () {
        // The pid counter wrapped between two ticks: the entry has a's start time, b holds its number.
        const a = spawn("sleep", ["0.2"], { detached: true, stdio: "ignore" })
        const stale = Processes.startTime(a.pid!)
        assert.isDefined(stale)
        yield* Effect.async<void>((resume) => {
          a.once("exit", () => resume(Effect.void))
        })
        const b = spawn("sleep", ["30"], { detached: true, stdio: "ignore" })
        leftBehind.push(b.pid!)
        yield* until(
          Effect.sync(() => running(b.pid!)),
          (r) => r
        )
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const journal = yield* Journal.Journal
          const registry = Processes.make()
          registry.unsafeTrack(b.pid!, { tool: "careless" }, stale!)
          yield* Effect.sleep("20 millis")
          const auto = yield* Watchdog.make(
            { gateway, journal, processes: registry },
            { mode: "auto", processMaxAge: "1 millis" }
          )
          assert.deepStrictEqual(yield* auto.check, [])
          assert.isTrue(running(b.pid!), "the unrelated process was left alone")
          assert.deepStrictEqual(yield* auto.incidents(op, {}), [])
          assert.deepStrictEqual(yield* registry.live, [], "the stale entry is forgotten")

          // The same process tracked as itself is an orphan, and killed.
          registry.unsafeTrack(b.pid!, { tool: "careless" })
          yield* Effect.sleep("20 millis")
          const [incident] = yield* auto.check
          assert.strictEqual(incident?.subject, `pgid:${b.pid}`)
          assert.strictEqual(incident?.action, "killed")
          assert.isFalse(running(b.pid!))
        }).pipe(
          Effect.provide(
            gatewayLayer({ model: ScriptedModel.make([]), journal: SqliteJournal.layer({ filename: fresh() }) })
          ),
          Effect.scoped
        )
      }).pipe(Effect.ensuring(Effect.sync(() => killLeftBehind())))
  )

  it.live(
    "Sandbox.spawn tracks its group with the tool call; one running past processMaxAge is killed in auto mode",
    () =>
      Effect.gen(function* () {
        const registry = Processes.make()
        const workspace = mkdtempSync(join(tmpdir(), "palyra-watchdog-ws-"))
        const long = Tool.make("long", {
          description: "runs a long command",
          parameters: Schema.Struct({}),
          risk: "low",
          timeout: "1 hour",
          execute: (_args, context) =>
            Sandbox.spawn(
              {
                tool: "long",
                argv: ["sleep", "120"],
                workspace,
                cwd: workspace,
                timeoutMs: 120_000,
                maxOutputBytes: 1024,
                owner: context
              },
              { processes: registry }
            )
        })
        const filename = fresh()
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const journal = yield* Journal.Journal
          const alice = Caller.user("alice")
          const { run } = yield* gateway.sendMessage(alice, { text: "run long" })
          const [group] = yield* until(registry.live, (l) => l.length === 1)
          assert.strictEqual(group?.tool, "long")
          assert.strictEqual(group?.runId, run.id)
          assert.strictEqual(group?.sessionId, run.sessionId)
          assert.isNotNull(group?.toolCallId)
          assert.isNull(group?.callEndedAt)
          assert.isTrue(running(group!.pgid))

          const young = yield* Watchdog.make({ gateway, journal, processes: registry }, { mode: "auto" })
          assert.deepStrictEqual(yield* young.check, []) // its call is running and it is young
          yield* Effect.sleep("300 millis")
          const auto = yield* Watchdog.make(
            { gateway, journal, processes: registry },
            { mode: "auto", processMaxAge: "200 millis" }
          )
          const [incident] = yield* auto.check
          assert.strictEqual(incident?.kind, "tool_process_orphaned")
          assert.strictEqual(incident?.action, "killed")
          assert.match(incident!.detail, /has been running for \d+ms \(limit 200ms\)/)
          assert.isFalse(running(group!.pgid))
          // The call saw its program killed and the run went on.
          assert.strictEqual((yield* gateway.awaitRun(alice, run.id)).state, "Done")
          const tape = yield* gateway.readTape(alice, run.sessionId, { afterSeq: 0 })
          const result = tape.find((e) => e._tag === "ToolResult")
          assert.include(result?._tag === "ToolResult" ? result.output : "", "SIGKILL")
          yield* auto.check
          assert.deepStrictEqual(yield* auto.incidents(op, { state: "open" }), [])
          assert.deepStrictEqual(yield* registry.live, [])
        }).pipe(
          Effect.provide(
            gatewayLayer({
              model: ScriptedModel.make([{ toolCalls: [{ name: "long" }] }, { text: "done" }]),
              tools: [long],
              journal: SqliteJournal.layer({ filename })
            })
          ),
          Effect.scoped
        )
      })
  )

  it.live("mode off does nothing", () =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const journal = yield* Journal.Journal
      const off = yield* Watchdog.make({ gateway, journal }, { mode: "off" })
      assert.deepStrictEqual(yield* off.check, [])
      assert.deepStrictEqual(yield* gateway.listSessions(op, { principal: "system:watchdog" }), [])
    }).pipe(Effect.provide(gatewayLayer({ model: ScriptedModel.make([]) })), Effect.scoped)
  )
})

import { type ChildProcess, spawn as spawnChild } from "node:child_process"
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync
} from "node:fs"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { basename, join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Schedule } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import { Caller, Ids, PolicyEngine, ScriptedModel, type TapeEvent, Tool } from "../src/index.js"
import { collect } from "../src/testing.js"
import { BuiltinTools, Processes, Sandbox } from "../src/tools.js"
import { withGateway } from "./helpers.js"

// Sandboxed programs run as an unprivileged user (nobody when the tests run as root), so the
// workspace is world-writable and the canary world-readable: when a read fails, the sandbox did it.
const workspace = mkdtempSync(join(tmpdir(), "palyra-sandbox-ws-"))
chmodSync(workspace, 0o777)
writeFileSync(join(workspace, "hello.txt"), "hello from the workspace")
const home = mkdtempSync(join(tmpdir(), "palyra-sandbox-home-"))
chmodSync(home, 0o755)
const canary = join(home, "canary.txt")
writeFileSync(canary, "CANARY-7f3a")
chmodSync(canary, 0o644)

const report = await Effect.runPromise(Sandbox.probe())
const skipMessage = (tier: string, detail: string) =>
  console.warn(
    `\n${"!".repeat(100)}\n!! SKIPPING the ${tier}-tier sandbox tests: ${detail}\n!! Install bubblewrap and util-linux (as root: node scripts/system-deps.mjs).\n${"!".repeat(100)}\n`
  )
if (!report.limits.available) skipMessage("limits", report.limits.detail)
else if (!report.os.available) skipMessage("os", report.os.detail)

const spawn = (argv: ReadonlyArray<string>, options: Sandbox.Options, timeoutMs = 10_000) =>
  Sandbox.spawn({ tool: "test", argv, workspace, cwd: workspace, timeoutMs, maxOutputBytes: 64 * 1024 }, options)

/** Host processes whose command line contains `tag`, read from the host's /proc. */
const processesWith = (tag: string): Array<number> =>
  readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .flatMap((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(tag) ? [Number(pid)] : []
      } catch {
        return []
      }
    })

const pollUntil = <A>(read: () => A, done: (a: A) => boolean) =>
  Effect.sync(read).pipe(
    Effect.repeat({ schedule: Schedule.spaced("25 millis"), until: done }),
    Effect.timeout("5 seconds"),
    Effect.ignore,
    Effect.zipRight(Effect.sync(read))
  )

/** A TCP listener on 127.0.0.1 that counts connections. */
const withListener = <A, E>(body: (port: number, connections: () => number) => Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.async<{ server: Server; count: { n: number } }>((resume) => {
      const count = { n: 0 }
      const server = createServer((socket) => {
        count.n++
        socket.destroy()
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ server, count })))
    }),
    ({ server, count }) => {
      const address = server.address()
      return body(typeof address === "object" && address !== null ? address.port : 0, () => count.n)
    },
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

describe.skipIf(!report.os.available)("os tier (bubblewrap)", () => {
  const os: Sandbox.Options = { tier: "os" }

  it.live("a file outside the workspace is not there (the same read works without the os tier)", () =>
    Effect.gen(function* () {
      const inside = yield* spawn(["cat", canary], os)
      assert.notStrictEqual(inside.exitCode, 0)
      assert.notInclude(inside.stdout, "CANARY-7f3a")
      assert.match(inside.stderr, /No such file or directory/)
      const limits = yield* spawn(["cat", canary], { tier: "limits" })
      assert.strictEqual(limits.stdout, "CANARY-7f3a") // same user, no namespace: readable
      const own = yield* spawn(["cat", "hello.txt"], os)
      assert.strictEqual(own.stdout, "hello from the workspace")
    })
  )

  it.live("no network: a connect to a listener on the host's 127.0.0.1 fails and the listener sees nothing", () =>
    withListener((port, connections) =>
      Effect.gen(function* () {
        const connect = ["bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/${port} && echo connected`]
        const denied = yield* spawn(connect, { ...os, allowInterpreters: ["bash"] })
        assert.notStrictEqual(denied.exitCode, 0)
        assert.notInclude(denied.stdout, "connected")
        assert.strictEqual(connections(), 0)
        const allowed = yield* spawn(connect, { ...os, allowInterpreters: ["bash"], network: "allow" })
        assert.strictEqual(allowed.stdout, "connected\n")
        assert.strictEqual(yield* pollUntil(connections, (n) => n >= 1), 1)
      })
    )
  )

  it.live("the daemon's process is not visible: no /proc entry, kill -0 finds no such process", () =>
    Effect.gen(function* () {
      const pid = String(process.pid)
      const proc = yield* spawn(["ls", "/proc"], os)
      const pids = proc.stdout.split("\n").filter((l) => /^\d+$/.test(l))
      assert.notInclude(pids, pid)
      assert.isAtMost(pids.length, 4) // bubblewrap's init, prlimit→ls, and little else
      const kill = yield* spawn(["kill", "-0", pid], { ...os, allowExecutables: ["kill"] })
      assert.notStrictEqual(kill.exitCode, 0)
      assert.match(kill.stderr, /No such process/)
      // Control: the same check without the os tier does see it.
      assert.strictEqual((yield* spawn(["ls", "-d", `/proc/${pid}`], { tier: "limits" })).exitCode, 0)
    })
  )

  it.live("the workspace is writable, or read-only by config; /tmp is private and HOME is in it", () =>
    Effect.gen(function* () {
      const name = `private-${process.pid}`
      const env = yield* spawn(["sh", "-c", `echo "$HOME"; touch "$HOME/${name}" && ls -A /tmp; echo --; env`], {
        ...os,
        allowInterpreters: ["sh"]
      })
      const [listing, vars] = env.stdout.trim().split("\n--\n") as [string, string]
      const [homeDir, ...inTmp] = listing.split("\n")
      assert.strictEqual(homeDir, "/tmp")
      // The private /tmp holds the new file and the workspace's mount point (the workspace is under /tmp here).
      assert.deepStrictEqual(inTmp.sort(), [name, basename(workspace)].sort())
      assert.isFalse(existsSync(join(tmpdir(), name)))
      // A cleared environment: only what the sandbox set (and the PWD the shell adds).
      assert.deepStrictEqual(
        vars
          .split("\n")
          .map((v) => v.split("=")[0])
          .sort(),
        ["HOME", "LANG", "PATH", "PWD"]
      )
      assert.strictEqual((yield* spawn(["touch", "made-inside"], os)).exitCode, 0)
      assert.isTrue(existsSync(join(workspace, "made-inside")))
      const ro = yield* spawn(["touch", "not-made"], { ...os, workspace: "ro" })
      assert.match(ro.stderr, /Read-only file system/)
      assert.isFalse(existsSync(join(workspace, "not-made")))
    })
  )

  it.live("bubblewrap missing or failing: the call fails closed and nothing runs", () =>
    Effect.gen(function* () {
      const missing = yield* Effect.flip(
        spawn(["touch", "ran-without-sandbox"], { ...os, bwrapPath: "/nowhere/bwrap" })
      )
      assert.strictEqual(missing.reason, "refused")
      assert.match(missing.message, /bubblewrap \(bwrap\) was not found at \/nowhere\/bwrap/)
      const broken = yield* Effect.flip(spawn(["touch", "ran-without-sandbox"], { ...os, bwrapPath: "/bin/false" }))
      assert.strictEqual(broken.reason, "refused")
      assert.match(broken.message, /the os sandbox did not start/)
      // A real set-up failure: the sandbox user cannot enter the workspace, so bubblewrap cannot bind it.
      const closed = mkdtempSync(join(tmpdir(), "palyra-sandbox-closed-"))
      chmodSync(closed, 0o700)
      const unbound = yield* Effect.flip(
        Sandbox.spawn(
          {
            tool: "test",
            argv: ["touch", "ran"],
            workspace: closed,
            cwd: closed,
            timeoutMs: 5_000,
            maxOutputBytes: 4096
          },
          { ...os, user: { uid: 65534, gid: 65534 } }
        )
      )
      assert.strictEqual(unbound.reason, "refused")
      assert.match(unbound.message, /the os sandbox did not start \(bwrap: .*Permission denied\)/)
      assert.isFalse(existsSync(join(closed, "ran")))
      assert.isFalse(existsSync(join(workspace, "ran-without-sandbox")))
      const probed = yield* Sandbox.probe({ bwrapPath: "/nowhere/bwrap" })
      assert.isFalse(probed.os.available)
      assert.match(probed.os.detail, /not found/)
      assert.isTrue(probed.none.available)
    })
  )
})

describe.skipIf(!report.limits.available)("limits tier (allowlist, rlimits)", () => {
  it.live("a fork bomb is stopped by the process limit (the same script completes under a higher limit)", () =>
    Effect.gen(function* () {
      const bomb = ["sh", "-c", "i=0; while [ $i -lt 40 ]; do sleep 1 & i=$((i+1)); done; wait; echo all-started"]
      const stopped = yield* spawn(bomb, { tier: "limits", allowInterpreters: ["sh"], limits: { processes: 12 } })
      assert.notInclude(stopped.stdout, "all-started")
      assert.match(stopped.stderr, /Cannot fork|Resource temporarily unavailable/)
      assert.notStrictEqual(stopped.exitCode, 0)
      const control = yield* spawn(bomb, { tier: "limits", allowInterpreters: ["sh"], limits: { processes: 4096 } })
      assert.strictEqual(control.stdout, "all-started\n")
    })
  )

  it.live("a memory hog is stopped by the memory limit (and runs under a larger one)", () =>
    Effect.gen(function* () {
      const hog = ["perl", "-e", "my $x = 'x' x (160 * 1024 * 1024); print length $x"]
      const stopped = yield* spawn(hog, {
        tier: "limits",
        allowInterpreters: ["perl"],
        limits: { memoryBytes: 64 << 20 }
      })
      assert.notStrictEqual(stopped.exitCode, 0)
      assert.match(stopped.stderr, /Out of memory/)
      const control = yield* spawn(hog, {
        tier: "limits",
        allowInterpreters: ["perl"],
        limits: { memoryBytes: 1 << 30 }
      })
      assert.strictEqual(control.stdout, String(160 * 1024 * 1024))
    })
  )

  it.live("a write past the file-size limit is stopped by SIGXFSZ", () =>
    Effect.gen(function* () {
      const dd = ["dd", "if=/dev/zero", "of=big.bin", "bs=1M", "count=4"]
      const r = yield* spawn(dd, { tier: "limits", allowExecutables: ["dd"], limits: { fileBytes: 1 << 20 } })
      assert.strictEqual(r.signal, "SIGXFSZ")
      assert.strictEqual(statSync(join(workspace, "big.bin")).size, 1 << 20)
    })
  )

  it.live("interpreters and launchers are refused unless allowed, even when on the allowlist", () =>
    Effect.gen(function* () {
      for (const argv of [
        ["sh", "-c", "touch interpreted"],
        ["/bin/sh", "-c", "touch interpreted"],
        ["perl", "-e", "open(F, '>interpreted')"],
        ["python3", "-c", "open('interpreted', 'w')"],
        ["env", "touch", "interpreted"]
      ]) {
        const error = yield* Effect.flip(
          spawn(argv, { tier: "limits", allowExecutables: ["sh", "perl", "python3", "env", "touch"] })
        )
        assert.strictEqual(error.reason, "refused")
        assert.match(error.message, /interpreter or launcher/)
      }
      assert.isFalse(existsSync(join(workspace, "interpreted")))
      // A script on the allowlist runs its #! interpreter: judged as that interpreter.
      writeFileSync(join(workspace, "job"), "#!/bin/sh\ntouch interpreted\n", { mode: 0o755 })
      writeFileSync(join(workspace, "env-job"), "#!/usr/bin/env perl\nopen(F, '>interpreted')\n", { mode: 0o755 })
      for (const script of ["job", "env-job"]) {
        const error = yield* Effect.flip(
          spawn([`./${script}`], { tier: "limits", allowExecutables: [join(workspace, script)] })
        )
        assert.match(error.message, /is a script for \/usr\/bin\/(dash|perl)/)
      }
      assert.isFalse(existsSync(join(workspace, "interpreted")))
      const allowed = yield* spawn(["sh", "-c", "touch interpreted"], { tier: "limits", allowInterpreters: ["sh"] })
      assert.strictEqual(allowed.exitCode, 0)
      assert.isTrue(existsSync(join(workspace, "interpreted")))
    })
  )

  it.live("a program not on the allowlist is refused, by real path (a copy of an allowed one too)", () =>
    Effect.gen(function* () {
      const notListed = yield* Effect.flip(spawn(["touch", "unlisted"], { tier: "limits", allowExecutables: ["cat"] }))
      assert.strictEqual(notListed.reason, "refused")
      assert.match(notListed.message, /touch \(\/usr\/bin\/touch\) is not on the sandbox.allowExecutables list/)
      assert.isFalse(existsSync(join(workspace, "unlisted")))
      copyFileSync("/usr/bin/cat", join(workspace, "cat"))
      chmodSync(join(workspace, "cat"), 0o755)
      const copy = yield* Effect.flip(spawn(["./cat", "hello.txt"], { tier: "limits", allowExecutables: ["cat"] }))
      assert.match(copy.message, /not on the sandbox.allowExecutables list/)
      const missing = yield* Effect.flip(spawn(["no-such-program"], { tier: "limits" }))
      assert.match(missing.message, /was not found on the PATH/)
      assert.strictEqual((yield* spawn(["cat", "hello.txt"], { tier: "limits" })).stdout, "hello from the workspace")
    })
  )

  it.live("never as root; invalid limits are refused before anything runs", () =>
    Effect.gen(function* () {
      const root = yield* Effect.flip(spawn(["true"], { tier: "limits", user: { uid: 0, gid: 0 } }))
      assert.match(root.message, /refusing to run a sandboxed program as root/)
      const bad = yield* Effect.flip(spawn(["true"], { tier: "limits", limits: { processes: 0 } }))
      assert.match(bad.message, /sandbox.limits.processes must be a positive integer/)
    })
  )
})

describe("the whole process tree dies on cancel and on timeout", () => {
  const tiers: ReadonlyArray<Sandbox.Tier> = [
    "none",
    ...(report.limits.available ? (["limits"] as const) : []),
    ...(report.os.available ? (["os"] as const) : [])
  ]
  for (const tier of tiers) {
    const tree = (tag: string) => ["sh", "-c", `sleep ${tag} & sleep ${tag} & wait`]
    const options: Sandbox.Options = { tier, allowInterpreters: ["sh"] }

    it.live(`${tier}: cancel`, () =>
      Effect.gen(function* () {
        const tag = `97.${process.pid}1`
        const fiber = yield* Effect.fork(spawn(tree(tag), options, 60_000))
        const sleeps = () =>
          processesWith(tag).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("sleep"))
        assert.strictEqual((yield* pollUntil(sleeps, (p) => p.length === 2)).length, 2)
        const all = processesWith(tag) // the sleeps, the shell, and bubblewrap's processes in the os tier
        yield* Fiber.interrupt(fiber)
        const left = yield* pollUntil(
          () =>
            all.filter((pid) => existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`).length > 0),
          (l) => l.length === 0
        )
        assert.deepStrictEqual(left, [])
      })
    )

    it.live(`${tier}: timeout`, () =>
      Effect.gen(function* () {
        const tag = `96.${process.pid}2`
        const fiber = yield* Effect.fork(Effect.either(spawn(tree(tag), options, 1_500)))
        const seen = yield* pollUntil(
          () => processesWith(tag),
          (p) => p.length >= 3
        )
        const outcome = yield* Fiber.join(fiber)
        assert.isTrue(Either.isLeft(outcome) && outcome.left.reason === "timeout")
        const left = yield* pollUntil(
          () =>
            seen.filter((pid) => existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`).length > 0),
          (l) => l.length === 0
        )
        assert.deepStrictEqual(left, [])
      })
    )
  }
})

/** Parent pid and process group of a host process, from /proc/<pid>/stat. */
const parentAndGroup = (pid: number): [number, number] => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return [Number(fields[1]), Number(fields[2])]
}

describe.skipIf(!report.os.available)("os tier: the pid namespace dies with bubblewrap", () => {
  it.live("killing bubblewrap alone (not its process group) ends every process in the sandbox", () =>
    Effect.gen(function* () {
      const tag = `95.${process.pid}3`
      const fiber = yield* Effect.fork(
        Effect.either(
          spawn(["sh", "-c", `sleep ${tag} & sleep ${tag} & wait`], { tier: "os", allowInterpreters: ["sh"] })
        )
      )
      const sleeping = (pids: Array<number>) =>
        pids.filter((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("sleep")).length === 2
      const all = yield* pollUntil(() => processesWith(tag), sleeping)
      assert.isTrue(sleeping(all))
      const bwrap = all.find((pid) => parentAndGroup(pid)[0] === process.pid)!
      const group = parentAndGroup(bwrap)[1]
      const sleeps = all.filter((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("sleep"))
      // --new-session: the sandboxed programs are outside bubblewrap's process group, so only the
      // pid namespace can take them down.
      for (const pid of sleeps) assert.notStrictEqual(parentAndGroup(pid)[1], group)
      process.kill(bwrap, "SIGKILL")
      const outcome = yield* Fiber.join(fiber)
      assert.isTrue(Either.isLeft(outcome) && outcome.left.reason === "failed")
      const left = yield* pollUntil(
        () =>
          all.filter((pid) => existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`).length > 0),
        (l) => l.length === 0
      )
      assert.deepStrictEqual(left, [])
    })
  )
})

describe("the tier reaches the tape and the policy", () => {
  const shell = (tier: Sandbox.Tier) => BuiltinTools.shellTool({ root: workspace, sandbox: { tier } })
  const requireOs = `@id("allow-all")
permit (principal, action == Palyra::Action::"tool.execute", resource);

@id("shell-needs-os")
@reason("shell commands run only in the os sandbox")
forbid (principal, action == Palyra::Action::"tool.execute", resource)
when { resource.category == "shell" && context.sandbox != "os" };
`
  const requestFor = (tool: Tool.AnyTool): PolicyEngine.PolicyRequest => ({
    principal: "alice",
    sessionId: "01KA0000000000000000000SES" as never,
    channel: null,
    tool: { name: tool.name, risk: tool.risk, category: tool.category, sandbox: tool.sandbox },
    args: {},
    argsDigest: "d"
  })

  it.effect("Cedar can require the os tier for shell tools (context.sandbox)", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make({ policies: requireOs })
      for (const tier of ["none", "limits"] as const) {
        const d = yield* engine.decide(requestFor(shell(tier)))
        assert.deepStrictEqual([d.decision, d.policyIds], ["deny", ["shell-needs-os"]])
      }
      assert.strictEqual((yield* engine.decide(requestFor(shell("os")))).decision, "allow")
      // A tool that declares no sandbox counts as "none"; a non-shell one is not affected.
      const [fsRead] = BuiltinTools.fsTools({ root: workspace })
      assert.strictEqual(fsRead!.sandbox, undefined)
      assert.strictEqual((yield* engine.decide(requestFor(fsRead!))).decision, "allow")
      const { sandbox: _, ...undeclared } = requestFor(shell("os")).tool
      assert.strictEqual((yield* engine.decide({ ...requestFor(shell("os")), tool: undeclared })).decision, "deny")
    })
  )

  it.effect("the rules engine can match tiers too", () =>
    Effect.gen(function* () {
      const rules = PolicyEngine.makeRules([
        { id: "os-shell", effect: "permit", action: "tool.execute", when: { categories: ["shell"], sandbox: ["os"] } }
      ])
      assert.strictEqual((yield* rules.decide(requestFor(shell("os")))).decision, "allow")
      assert.strictEqual((yield* rules.decide(requestFor(shell("limits")))).decision, "deny")
    })
  )

  for (const tier of ["none", ...(report.os.available ? (["os"] as const) : [])] as const) {
    it.live(`in the agent loop: Cedar sees the ${tier} tier; the tape's result names it`, () =>
      Effect.gen(function* () {
        const model = ScriptedModel.make([
          { toolCalls: [{ name: "shell.exec", args: { argv: ["cat", "hello.txt"] } }] },
          { text: "done" }
        ])
        const policy = Layer.effect(PolicyEngine.PolicyEngine, CedarPolicy.make({ policies: requireOs }))
        yield* withGateway({ model, tools: [shell(tier)], policy: policy as never }, (gateway) =>
          Effect.gen(function* () {
            const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "read it" })
            const seen = yield* collect(events)
            const decided = seen.find((e): e is TapeEvent.TapeEventOf<"PolicyDecided"> => e._tag === "PolicyDecided")
            const result = seen.find((e): e is TapeEvent.TapeEventOf<"ToolResult"> => e._tag === "ToolResult")
            if (tier === "os") {
              assert.strictEqual(decided?.decision, "allow")
              assert.strictEqual(result?.status, "ok")
              const output = JSON.parse(result!.output)
              assert.strictEqual(output.sandbox, "os")
              assert.strictEqual(output.stdout, "hello from the workspace")
            } else {
              assert.deepStrictEqual([decided?.decision, decided?.policyIds], ["deny", ["shell-needs-os"]])
              assert.strictEqual(result?.status, "denied")
            }
          })
        )
      })
    )
  }

  it.live("shell.exec's output carries the tier it ran under", () =>
    Effect.gen(function* () {
      const runtime = Tool.makeRuntime([shell("none")])
      const out = yield* runtime.execute(
        shell("none"),
        { argv: ["true"] },
        {
          sessionId: "01KA0000000000000000000SES" as never,
          runId: "01KA0000000000000000000RUN" as never,
          toolCallId: "01KA00000000000000000000TC" as never,
          principal: "test",
          note: () => Effect.void
        }
      )
      assert.deepStrictEqual(JSON.parse(out.output), {
        exitCode: 0,
        signal: null,
        stdout: "",
        stderr: "",
        truncated: false,
        sandbox: "none"
      })
    })
  )
})

describe("live process groups are tracked for the watchdog", () => {
  it.live(
    "shell.exec: its group is in the registry with its run and tool call while it runs, and gone once cancelled",
    () =>
      Effect.gen(function* () {
        const processes = Processes.make()
        const shell = BuiltinTools.shellTool({ root: workspace, sandbox: { processes } })
        const context: Tool.ToolContext = {
          sessionId: yield* Ids.makeSessionId,
          runId: yield* Ids.makeRunId,
          toolCallId: yield* Ids.makeToolCallId,
          principal: "alice",
          note: () => Effect.void
        }
        const fiber = yield* Effect.fork(shell.execute({ argv: ["sleep", "30"], cwd: "." }, context))
        const [group] = yield* pollUntil(
          () => Effect.runSync(processes.live),
          (l) => l.length === 1
        )
        assert.deepStrictEqual(
          { tool: group?.tool, sessionId: group?.sessionId, runId: group?.runId, toolCallId: group?.toolCallId },
          { tool: "shell.exec", sessionId: context.sessionId, runId: context.runId, toolCallId: context.toolCallId }
        )
        assert.isNull(group?.callEndedAt)
        assert.isTrue(Processes.groupAlive(group!.pgid))
        yield* Fiber.interrupt(fiber)
        assert.deepStrictEqual(
          yield* pollUntil(
            () => Effect.runSync(processes.live),
            (l) => l.length === 0
          ),
          []
        )
        assert.isFalse(Processes.groupAlive(group!.pgid))
      })
  )
})

describe.skipIf(process.platform !== "linux")("a tracked group is told from a later one given its number", () => {
  const exited = (child: ChildProcess) =>
    Effect.async<void>((resume) => {
      if (child.exitCode !== null || child.signalCode !== null) resume(Effect.void)
      else child.once("exit", () => resume(Effect.void))
    })

  it.live("startTime reads field 22 even when the command name holds spaces and parentheses", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "palyra-comm-"))
      const odd = join(dir, "a) (b c")
      copyFileSync(existsSync("/usr/bin/sleep") ? "/usr/bin/sleep" : "/bin/sleep", odd)
      chmodSync(odd, 0o755)
      const child = spawnChild(odd, ["30"], { detached: true, stdio: "ignore" })
      yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
      const stat = yield* pollUntil(
        () => readFileSync(`/proc/${child.pid}/stat`, "utf8"),
        (s) => s.includes("(a) (b c)")
      )
      assert.include(stat, "(a) (b c)")
      const start = Processes.startTime(child.pid!)
      assert.match(start ?? "", /^\d+$/)
      assert.notStrictEqual(stat.split(" ")[21], start, "a naive split lands on another field")
      // Clock ticks since boot: no earlier than this test process started, no later than now.
      const uptimeTicks = Number(readFileSync("/proc/uptime", "utf8").split(" ")[0]) * 100
      assert.isAtLeast(Number(start), Number(Processes.startTime(process.pid)))
      assert.isAtMost(Number(start), Math.ceil(uptimeTicks) + 1)
      assert.strictEqual(Processes.startTime(child.pid!), start, "it is stable")
    }).pipe(Effect.scoped)
  )

  it.live("an entry whose number another process holds now is dropped, and that process is never killed", () =>
    Effect.gen(function* () {
      // The entry as it would stand had the pid counter wrapped: a's start time, b's number.
      const a = spawnChild("sleep", ["0.2"], { detached: true, stdio: "ignore" })
      const stale = Processes.startTime(a.pid!)
      assert.isDefined(stale)
      yield* exited(a)
      assert.isUndefined(Processes.startTime(a.pid!))
      const b = spawnChild("sleep", ["30"], { detached: true, stdio: "ignore" })
      yield* Effect.addFinalizer(() => Effect.sync(() => b.kill("SIGKILL")))
      const current = yield* pollUntil(
        () => Processes.startTime(b.pid!),
        (s) => s !== undefined
      )
      assert.notStrictEqual(current, stale)

      const registry = Processes.make()
      registry.unsafeTrack(b.pid!, { tool: "stale" }, stale!)
      assert.isTrue(yield* registry.kill(b.pid!), "the tracked group is gone")
      assert.isTrue(Processes.groupAlive(b.pid!), "the process now holding its number was left alone")
      registry.unsafeTrack(b.pid!, { tool: "stale" }, stale!)
      assert.deepStrictEqual(yield* registry.live, [], "nor is it reported")
      assert.isFalse(yield* registry.kill(b.pid!), "an untracked number is never signalled")
      assert.isTrue(Processes.groupAlive(b.pid!))

      // The same group tracked with its own start time is reported and killed.
      const own = Processes.make()
      own.unsafeTrack(b.pid!, { tool: "own" })
      const [group] = yield* own.live
      assert.strictEqual(group?.leaderStart, current)
      assert.isTrue(yield* own.kill(b.pid!))
      assert.isFalse(Processes.groupAlive(b.pid!))
      assert.deepStrictEqual(yield* own.live, [])
    }).pipe(Effect.scoped)
  )
})

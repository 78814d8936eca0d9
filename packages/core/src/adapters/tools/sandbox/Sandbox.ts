/**
 * Sandbox tiers for the processes tools start. One function, `spawn`, runs a program (argv form,
 * never a shell) under a tier; `shell.exec` uses it and so can any tool that starts a process.
 *
 * - `none`: an ordinary child in its own process group, with the caller's environment, a timeout
 *   and an output cap (the whole group is killed on timeout and on cancellation).
 * - `limits`: as `none`, plus: the program must be on an allowlist (names are resolved to absolute
 *   real paths); shells, language runtimes and launchers (`sh`, `bash`, `python`, `node`, `perl`,
 *   `env`, `xargs`…) are refused unless listed in `allowInterpreters`; util-linux `prlimit` sets
 *   rlimits for CPU seconds, address space, file size and processes (and no core dumps) and then
 *   execs the program; it never runs as root.
 * - `os` (Linux): as `limits`, inside bubblewrap: new user, pid, ipc and uts namespaces, no network
 *   unless `network: "allow"`, no capabilities, read-only system directories and a minimal /etc, a
 *   private /tmp, the new pid namespace's /proc, the workspace bound read-write (or read-only), a
 *   cleared environment. The sandbox dies with bubblewrap, so killing the process group ends the
 *   pid namespace and everything in it.
 *
 * Fail closed: when a tier cannot be set up (no `prlimit`, no `bwrap`, bubblewrap cannot create the
 * sandbox), the call fails with a `ToolError` (reason `refused`) and the program never runs
 * unsandboxed. `probe` reports which tiers work on this machine (for `palyra doctor`).
 *
 * @since 0.1.0
 */
import { execFile } from "node:child_process"
import { chmodSync, mkdtempSync, realpathSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { basename, join, sep } from "node:path"
import { Effect } from "effect"
import { ToolError } from "../../../domain/Errors.js"
import type { SandboxTier } from "../../../ports/Tool.js"
import { refused } from "../internal.js"
import { bwrapArgs, prlimitArgs, type ResolvedLimits, statusExitCode, visibleRoots } from "./internal/argv.js"
import { interpreterNames, isInterpreterName, resolveExecutable, shebangOf } from "./internal/executables.js"
import { type Ended, type Launch, runChild } from "./internal/run.js"
import * as Processes from "./Processes.js"

// =============================================================================
// Options
// =============================================================================

/** @since 0.1.0 @category Models */
export type Tier = SandboxTier

/** Resource limits (rlimits) of the `limits` and `os` tiers. @since 0.1.0 @category Models */
export interface Limits {
  /** CPU time in seconds: SIGXCPU at the limit, SIGKILL one second later (default 60). */
  readonly cpuSeconds?: number | undefined
  /** Address space in bytes; allocations beyond it fail (default 2 GiB). */
  readonly memoryBytes?: number | undefined
  /** Largest file the process may write, in bytes; SIGXFSZ beyond it (default 256 MiB). */
  readonly fileBytes?: number | undefined
  /**
   * Processes and threads (RLIMIT_NPROC, default 128). The kernel counts them per user: per sandbox
   * in the `os` tier (its own user namespace), across the whole sandbox user in the `limits` tier.
   */
  readonly processes?: number | undefined
}

/** A user and group to run sandboxed programs as. @since 0.1.0 @category Models */
export interface User {
  readonly uid: number
  readonly gid: number
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** Default `none` (an ordinary child process). */
  readonly tier?: Tier | undefined
  /** Programs that may run in the `limits` and `os` tiers: names (looked up on PATH) or paths. Default `defaultExecutables`. */
  readonly allowExecutables?: ReadonlyArray<string> | undefined
  /** Interpreters and launchers that may run (they need no entry in `allowExecutables`). Default none. */
  readonly allowInterpreters?: ReadonlyArray<string> | undefined
  readonly limits?: Limits | undefined
  /** Network in the `os` tier (default `deny`: a network namespace of its own, with only loopback). */
  readonly network?: "deny" | "allow" | undefined
  /** The workspace in the `os` tier: bound read-write (default) or read-only. */
  readonly workspace?: "rw" | "ro" | undefined
  /**
   * The user sandboxed programs run as. Default: the daemon's own user, or 65534:65534 (`nobody`)
   * when the daemon runs as root. Never root: the kernel does not apply the process limit to root.
   * The workspace must be readable (and writable, for `rw`) by this user.
   */
  readonly user?: User | undefined
  /** bubblewrap's path (default: `bwrap` on the daemon's PATH, else /usr/bin/bwrap). */
  readonly bwrapPath?: string | undefined
  /** util-linux prlimit's path (default: `prlimit` on the daemon's PATH, else /usr/bin/prlimit). */
  readonly prlimitPath?: string | undefined
  /** Where started process groups are tracked for the watchdog (default `Processes.shared`). */
  readonly processes?: Processes.Service | undefined
}

/** One program to run. @since 0.1.0 @category Models */
export interface Spec {
  /** The tool starting it (named in errors). */
  readonly tool: string
  /** Program and arguments; the program is a name looked up on the PATH of `env`, or a path. */
  readonly argv: ReadonlyArray<string>
  /** The workspace root: what the `os` tier exposes. */
  readonly workspace: string
  /** The working directory, already confined to the workspace. */
  readonly cwd: string
  /** The program's environment (default `defaultEnv(tier, workspace)`). */
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly timeoutMs: number
  /** Cap on stdout and stderr together, in bytes. */
  readonly maxOutputBytes: number
  /** The run and tool call it is for (tracked with its process group; see `Processes`). */
  readonly owner?: Omit<Processes.Owner, "tool"> | undefined
}

/** @since 0.1.0 @category Models */
export interface Result {
  /** The tier the program ran under. */
  readonly sandbox: Tier
  readonly exitCode: number | null
  readonly signal: string | null
  readonly stdout: string
  readonly stderr: string
  readonly truncated: boolean
}

/** @since 0.1.0 @category Constants */
export const defaultLimits: Required<{ readonly [K in keyof Limits]: number }> = {
  cpuSeconds: 60,
  memoryBytes: 2 * 1024 ** 3,
  fileBytes: 256 * 1024 ** 2,
  processes: 128
}

/**
 * The default allowlist: everyday file and text utilities that cannot run another program (no
 * `find`, `sort`, `sed`, `awk`, `git`, `tar`: each can run a command given in its arguments).
 *
 * @since 0.1.0
 * @category Constants
 */
export const defaultExecutables: ReadonlyArray<string> = [
  "ls",
  "cat",
  "head",
  "tail",
  "wc",
  "grep",
  "uniq",
  "cut",
  "tr",
  "diff",
  "cmp",
  "comm",
  "echo",
  "printf",
  "true",
  "false",
  "pwd",
  "date",
  "stat",
  "du",
  "basename",
  "dirname",
  "realpath",
  "readlink",
  "mkdir",
  "touch",
  "cp",
  "mv",
  "rm",
  "rmdir",
  "ln",
  "sleep",
  "tee",
  "md5sum",
  "sha256sum",
  "base64"
]

/**
 * Shells, language runtimes and launchers (`env`, `xargs`, `nohup`, `sudo`…) that the `limits` and
 * `os` tiers refuse unless listed in `allowInterpreters`; a script counts as the interpreter on its
 * `#!` line. A name list cannot be complete (some ordinary tools can run commands too), which is
 * why `allowExecutables` is an allowlist and the `os` tier exists.
 *
 * @since 0.1.0
 * @category Constants
 */
export const interpreters: ReadonlyArray<string> = interpreterNames

const systemPath = "/usr/local/bin:/usr/bin:/bin"

/**
 * The environment a program gets when the caller gives none: `none` keeps today's (the daemon's
 * PATH, HOME = the workspace); `limits` and `os` get a fixed system PATH, and `os` a HOME in its
 * private /tmp.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const defaultEnv = (tier: Tier, workspace: string): Record<string, string> => ({
  PATH: tier === "none" ? (process.env.PATH ?? systemPath) : systemPath,
  LANG: "C.UTF-8",
  HOME: tier === "os" ? "/tmp" : workspace
})

// =============================================================================
// Spawn
// =============================================================================

/** bubblewrap or prlimit: the configured path, else the daemon's PATH, else the usual places. */
const helper = (configured: string | undefined, name: string) =>
  configured !== undefined
    ? resolveExecutable(configured, "", "/")
    : resolveExecutable(name, `${process.env.PATH ?? ""}:/usr/bin:/bin:/usr/sbin:/sbin`, "/")

const sandboxUser = (tool: string, options: Options): Effect.Effect<User, ToolError> => {
  const uid = process.getuid?.() ?? 0
  const user = options.user ?? (uid === 0 ? { uid: 65534, gid: 65534 } : { uid, gid: process.getgid?.() ?? 0 })
  return user.uid === 0
    ? Effect.fail(
        refused(
          tool,
          "refusing to run a sandboxed program as root: the kernel does not apply the process limit to root; set sandbox.user to an unprivileged user"
        )
      )
    : Effect.succeed(user)
}

const resolveLimits = (tool: string, limits: Limits): Effect.Effect<ResolvedLimits, ToolError> => {
  const resolved: ResolvedLimits = {
    cpuSeconds: limits.cpuSeconds ?? defaultLimits.cpuSeconds,
    memoryBytes: limits.memoryBytes ?? defaultLimits.memoryBytes,
    fileBytes: limits.fileBytes ?? defaultLimits.fileBytes,
    processes: limits.processes ?? defaultLimits.processes
  }
  const bad = Object.entries(resolved).find(([, v]) => !Number.isSafeInteger(v) || v < 1)
  return bad === undefined
    ? Effect.succeed(resolved)
    : Effect.fail(refused(tool, `sandbox.limits.${bad[0]} must be a positive integer (got ${bad[1]}); nothing ran`))
}

const within = (roots: ReadonlyArray<string>, path: string) =>
  roots.some((root) => path === root || path.startsWith(root.endsWith(sep) ? root : root + sep))

/** Resolve the program and check it against the allowlist and the interpreter rule. */
const checkProgram = (spec: Spec, options: Options, path: string) =>
  Effect.gen(function* () {
    const name = spec.argv[0]!
    const program = resolveExecutable(name, path, spec.cwd)
    if (program === undefined) return yield* Effect.fail(refused(spec.tool, `${name} was not found on the PATH`))
    const resolveAll = (names: ReadonlyArray<string>) =>
      new Set(names.map((n) => resolveExecutable(n, path, spec.workspace)).filter((p) => p !== undefined))
    const allowedInterpreters = resolveAll(options.allowInterpreters ?? [])
    if (allowedInterpreters.has(program)) return program
    if (isInterpreterName(name) || isInterpreterName(program)) {
      return yield* Effect.fail(
        refused(
          spec.tool,
          `${name} (${program}) is an interpreter or launcher; it runs only when listed in sandbox.allowInterpreters`
        )
      )
    }
    const script = shebangOf(program)
    if (script !== undefined) {
      const interpreter = resolveExecutable(script, path, spec.workspace) ?? script
      if (!allowedInterpreters.has(interpreter)) {
        return yield* Effect.fail(
          refused(
            spec.tool,
            `${name} (${program}) is a script for ${interpreter}; it runs only when ${basename(interpreter)} is listed in sandbox.allowInterpreters`
          )
        )
      }
    }
    if (!resolveAll(options.allowExecutables ?? defaultExecutables).has(program)) {
      return yield* Effect.fail(refused(spec.tool, `${name} (${program}) is not on the sandbox.allowExecutables list`))
    }
    return program
  })

const finish = (spec: Spec, tier: Tier, limitMs: number) => (ended: Ended) =>
  ended.timedOut
    ? Effect.fail(
        new ToolError({
          tool: spec.tool,
          reason: "timeout",
          message: `killed after ${limitMs} ms (process group ${ended.pid}); output so far: ${ended.stdout.slice(0, 2000)}`
        })
      )
    : Effect.succeed<Result>({
        sandbox: tier,
        exitCode: ended.exitCode,
        signal: ended.signal,
        stdout: ended.stdout,
        stderr: ended.stderr,
        truncated: ended.truncated
      })

/**
 * Run one program under a tier and collect its output. Fails with `ToolError` `refused` when the
 * tier refuses the program or cannot be set up (nothing runs then), `timeout` when it is killed at
 * `spec.timeoutMs`, `failed` when it cannot be started. Interruption kills the whole process tree.
 *
 * @since 0.1.0
 * @category Spawn
 */
export const spawn = (spec: Spec, options: Options = {}): Effect.Effect<Result, ToolError> =>
  Effect.gen(function* () {
    const tier = options.tier ?? "none"
    const env = spec.env ?? defaultEnv(tier, spec.workspace)
    const limitMs = spec.timeoutMs
    if (spec.argv.length === 0) return yield* Effect.fail(refused(spec.tool, "no program given"))
    const registry = options.processes ?? Processes.shared
    const track = (pgid: number) => registry.unsafeTrack(pgid, { ...spec.owner, tool: spec.tool })
    if (tier === "none") {
      const launch: Launch = { command: spec.argv[0]!, args: spec.argv.slice(1), cwd: spec.cwd, env }
      return yield* runChild(spec.tool, launch, limitMs, spec.maxOutputBytes, track).pipe(
        Effect.flatMap(finish(spec, tier, limitMs))
      )
    }
    if (process.platform !== "linux") {
      return yield* Effect.fail(refused(spec.tool, `the ${tier} sandbox tier needs Linux; nothing ran`))
    }
    const prlimit = helper(options.prlimitPath, "prlimit")
    if (prlimit === undefined) {
      return yield* Effect.fail(
        refused(
          spec.tool,
          `prlimit (util-linux) was not found${options.prlimitPath ? ` at ${options.prlimitPath}` : ""}; the ${tier} tier fails closed and nothing ran`
        )
      )
    }
    const user = yield* sandboxUser(spec.tool, options)
    const program = yield* checkProgram(spec, options, env.PATH ?? systemPath)
    const limits = yield* resolveLimits(spec.tool, options.limits ?? {})
    const asUser = {
      ...(user.uid !== process.getuid?.() ? { uid: user.uid } : {}),
      ...(user.gid !== process.getgid?.() ? { gid: user.gid } : {})
    }
    const limited = [...prlimitArgs(limits), program, ...spec.argv.slice(1)]
    if (tier === "limits") {
      const launch: Launch = { command: prlimit, args: limited, cwd: spec.cwd, env, ...asUser }
      return yield* runChild(spec.tool, launch, limitMs, spec.maxOutputBytes, track).pipe(
        Effect.flatMap(finish(spec, tier, limitMs))
      )
    }
    // tier === "os"
    const bwrap = helper(options.bwrapPath, "bwrap")
    if (bwrap === undefined) {
      return yield* Effect.fail(
        refused(
          spec.tool,
          `bubblewrap (bwrap) was not found${options.bwrapPath ? ` at ${options.bwrapPath}` : " on PATH"}; the os sandbox tier fails closed and nothing ran`
        )
      )
    }
    const workspace = yield* Effect.try({
      try: () => realpathSync(spec.workspace),
      catch: () => refused(spec.tool, `the workspace ${spec.workspace} does not exist`)
    })
    if (workspace === "/") return yield* Effect.fail(refused(spec.tool, "the os tier cannot expose / as the workspace"))
    const cwd = yield* Effect.try({
      try: () => realpathSync(spec.cwd),
      catch: () => refused(spec.tool, `the working directory ${spec.cwd} does not exist`)
    })
    if (!within([workspace], cwd)) {
      return yield* Effect.fail(refused(spec.tool, `the working directory ${spec.cwd} is outside the workspace`))
    }
    for (const path of [prlimit, program]) {
      if (!within([...visibleRoots, workspace], path)) {
        return yield* Effect.fail(refused(spec.tool, `${path} is not visible inside the os sandbox; nothing ran`))
      }
    }
    const args = bwrapArgs({
      workspace,
      workspaceMode: options.workspace ?? "rw",
      cwd,
      network: options.network ?? "deny",
      env,
      statusFd: 3
    })
    const launch: Launch = {
      command: bwrap,
      args: [...args, prlimit, ...limited],
      cwd: "/",
      env: { PATH: systemPath },
      statusFd: true,
      ...asUser
    }
    const ended = yield* runChild(spec.tool, launch, limitMs, spec.maxOutputBytes, track)
    if (!ended.timedOut && statusExitCode(ended.status) === undefined) {
      if (ended.signal !== null) {
        // Killed from outside (an operator, the OOM killer): the sandbox died with it.
        return yield* Effect.fail(
          new ToolError({
            tool: spec.tool,
            reason: "failed",
            message: `bubblewrap was killed by ${ended.signal}; the sandbox and everything in it ended`
          })
        )
      }
      // bubblewrap exited without an exit-code record: it never ran the command (it could not
      // build the sandbox, or could not exec the program inside it).
      const said = ended.stderr.split("\n").findLast((line) => line.startsWith("bwrap:"))
      return yield* Effect.fail(
        refused(
          spec.tool,
          `the os sandbox did not start (${said ?? `bubblewrap exited with ${ended.exitCode ?? ended.signal}`}); nothing ran`
        )
      )
    }
    return yield* finish(spec, tier, limitMs)(ended)
  })

// =============================================================================
// Probe
// =============================================================================

/** @since 0.1.0 @category Models */
export interface TierStatus {
  readonly available: boolean
  /** What was found, or why the tier cannot run here. */
  readonly detail: string
}

/** @since 0.1.0 @category Models */
export type ProbeReport = { readonly [T in Tier]: TierStatus }

const version = (path: string) =>
  Effect.async<string>((resume) => {
    execFile(path, ["--version"], { timeout: 5_000 }, (_error, stdout) => resume(Effect.succeed(stdout.trim())))
  })

/**
 * Which tiers work on this machine with these options: each is tried for real (`true` under the
 * tier, in a scratch workspace). `palyra doctor` prints it.
 *
 * @since 0.1.0
 * @category Probe
 */
export const probe = (options: Options = {}): Effect.Effect<ProbeReport> =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(join(tmpdir(), "palyra-sandbox-probe-"))
      chmodSync(dir, 0o755) // the sandbox user must be able to enter it
      return dir
    }),
    (workspace) => {
      const trial = (tier: Tier) =>
        spawn(
          { tool: "sandbox.probe", argv: ["true"], workspace, cwd: workspace, timeoutMs: 10_000, maxOutputBytes: 4096 },
          { ...options, tier, allowExecutables: ["true"] }
        ).pipe(
          Effect.flatMap((r) =>
            r.exitCode === 0
              ? Effect.void
              : Effect.fail(`\`true\` exited with ${r.exitCode ?? r.signal}: ${r.stderr.trim()}`)
          ),
          Effect.mapError((e) => (typeof e === "string" ? e : e.message)),
          Effect.either
        )
      return Effect.gen(function* () {
        const limits = yield* trial("limits")
        const os = yield* trial("os")
        const prlimit = helper(options.prlimitPath, "prlimit")
        const bwrap = helper(options.bwrapPath, "bwrap")
        const user = options.user ?? (process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined)
        const runsAs = user ? `, runs as ${user.uid}:${user.gid}` : ""
        return {
          none: { available: true, detail: "an ordinary child process in its own process group" },
          limits:
            limits._tag === "Right"
              ? { available: true, detail: `${prlimit ? yield* version(prlimit) : "prlimit"}${runsAs}` }
              : { available: false, detail: limits.left },
          os:
            os._tag === "Right"
              ? { available: true, detail: `${bwrap ? yield* version(bwrap) : "bwrap"}${runsAs}` }
              : { available: false, detail: os.left }
        }
      })
    },
    (workspace) => Effect.sync(() => rmSync(workspace, { recursive: true, force: true }))
  )

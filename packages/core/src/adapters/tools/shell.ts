/**
 * `shell.exec`: argv form only (no shell, no string interpolation), cwd inside the workspace, a
 * scrubbed environment, a timeout and an output cap; it runs in its own process group, which is
 * killed on timeout and on cancellation, so no child outlives the call.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import { Effect, Schema } from "effect"
import { ToolError } from "../../domain/Errors.js"
import * as Tool from "../../ports/Tool.js"
import { confine } from "./fs.js"
import { failed } from "./internal.js"
/** @since 0.1.0 @category Models */
export interface ShellOptions {
  /** Commands run with their cwd inside this root. */
  readonly root: string
  /** Default and largest timeout, in ms (default 30 s). */
  readonly timeoutMs?: number | undefined
  /** Output cap for stdout and stderr together, in bytes (default 64 KiB). */
  readonly maxOutputBytes?: number | undefined
  /** Environment passed to commands (default: PATH, LANG and HOME = the root only). */
  readonly env?: Readonly<Record<string, string>> | undefined
}

const killGroup = (child: ChildProcess) => {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/** `shell.exec`: argv only, confined cwd, scrubbed env, timeout, output cap, group kill. @since 0.1.0 @category Tools */
export const shellTool = (options: ShellOptions): Tool.AnyTool => {
  const maxTimeout = options.timeoutMs ?? 30_000
  const maxOutput = options.maxOutputBytes ?? 64 * 1024
  const env = options.env ?? {
    PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    LANG: "C.UTF-8",
    HOME: options.root
  }
  return Tool.make("shell.exec", {
    description: "Run a program with arguments (argv form; no shell features such as pipes or globs) in the workspace.",
    parameters: Schema.Struct({
      argv: Schema.Array(Schema.String).pipe(Schema.minItems(1), Schema.maxItems(256)),
      cwd: Schema.optionalWith(Schema.String, { default: () => "." }),
      timeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(1, 3_600_000)))
    }),
    risk: "sensitive",
    category: "shell",
    timeout: `${maxTimeout + 5_000} millis`,
    execute: ({ argv, cwd, timeoutMs }) =>
      Effect.gen(function* () {
        const dir = yield* confine("shell.exec", options.root, cwd)
        const limit = Math.min(timeoutMs ?? maxTimeout, maxTimeout)
        return yield* Effect.async<
          {
            exitCode: number | null
            signal: string | null
            stdout: string
            stderr: string
            truncated: boolean
            pid: number | undefined
            timedOut: boolean
          },
          ToolError
        >((resume) => {
          const child = spawn(argv[0]!, argv.slice(1), {
            cwd: dir,
            env: { ...env },
            detached: true, // its own process group, so the whole group can be killed
            stdio: ["ignore", "pipe", "pipe"],
            shell: false
          })
          let out = ""
          let err = ""
          let bytes = 0
          let truncated = false
          let timedOut = false
          const take = (chunk: Buffer, into: "out" | "err") => {
            const room = maxOutput - bytes
            if (room <= 0) {
              truncated = true
              return
            }
            const piece = chunk.subarray(0, room).toString("utf8")
            bytes += Math.min(chunk.length, room)
            if (chunk.length > room) truncated = true
            if (into === "out") out += piece
            else err += piece
          }
          child.stdout!.on("data", (c: Buffer) => take(c, "out"))
          child.stderr!.on("data", (c: Buffer) => take(c, "err"))
          const timer = setTimeout(() => {
            timedOut = true
            killGroup(child)
          }, limit)
          child.on("error", (e) => {
            clearTimeout(timer)
            resume(Effect.fail(failed("shell.exec")(e)))
          })
          child.on("close", (code, signal) => {
            clearTimeout(timer)
            killGroup(child) // reap anything it left running in its group
            resume(
              Effect.succeed({
                exitCode: code,
                signal,
                stdout: out,
                stderr: err,
                truncated,
                pid: child.pid,
                timedOut
              })
            )
          })
          // Cancellation: kill the whole process group.
          return Effect.sync(() => {
            clearTimeout(timer)
            killGroup(child)
          })
        }).pipe(
          Effect.flatMap((r) =>
            r.timedOut
              ? Effect.fail(
                  new ToolError({
                    tool: "shell.exec",
                    reason: "timeout",
                    message: `killed after ${limit} ms (process group ${r.pid}); output so far: ${r.stdout.slice(0, 2000)}`
                  })
                )
              : Effect.succeed({
                  exitCode: r.exitCode,
                  signal: r.signal,
                  stdout: r.stdout,
                  stderr: r.stderr,
                  truncated: r.truncated
                })
          )
        )
      })
  })
}

import { type ChildProcess, spawn } from "node:child_process"
import { Effect } from "effect"
import type { ToolError } from "../../../../domain/Errors.js"
import { failed } from "../../internal.js"

/** One child process to start: the program (an absolute path, or a name for the `none` tier). @internal */
export interface Launch {
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly cwd: string
  readonly env: Readonly<Record<string, string>>
  /** Switch to this user and group before exec (Node's `uid`/`gid`; libuv also drops supplementary groups). */
  readonly uid?: number | undefined
  readonly gid?: number | undefined
  /** Open fd 3 as a pipe and collect what the child writes there (bubblewrap's `--json-status-fd 3`). */
  readonly statusFd?: boolean | undefined
}

/** How the child ended. @internal */
export interface Ended {
  readonly exitCode: number | null
  readonly signal: string | null
  readonly stdout: string
  readonly stderr: string
  readonly truncated: boolean
  readonly pid: number | undefined
  readonly timedOut: boolean
  /** What the child wrote on fd 3 (empty without `statusFd`). */
  readonly status: string
}

const killGroup = (child: ChildProcess) => {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/**
 * Run a child in its own process group with an output cap and a wall-clock limit. On the limit and
 * on interruption the whole group gets SIGKILL, and the group is killed again once the leader has
 * exited, so nothing it started in its group outlives the call.
 *
 * @internal
 */
export const runChild = (
  tool: string,
  launch: Launch,
  limitMs: number,
  maxOutputBytes: number,
  /** Told the new group's id; returns what to call when the call ends (see `Processes`). */
  track?: (pgid: number) => () => void
): Effect.Effect<Ended, ToolError> =>
  Effect.async<Ended, ToolError>((resume) => {
    const child = spawn(launch.command, [...launch.args], {
      cwd: launch.cwd,
      env: { ...launch.env },
      detached: true, // its own process group, so the whole group can be killed
      stdio: launch.statusFd ? ["ignore", "pipe", "pipe", "pipe"] : ["ignore", "pipe", "pipe"],
      shell: false,
      ...(launch.uid !== undefined ? { uid: launch.uid } : {}),
      ...(launch.gid !== undefined ? { gid: launch.gid } : {})
    })
    const release = child.pid === undefined ? undefined : track?.(child.pid)
    let out = ""
    let err = ""
    let status = ""
    let bytes = 0
    let truncated = false
    let timedOut = false
    const take = (chunk: Buffer, into: "out" | "err") => {
      const room = maxOutputBytes - bytes
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
    const statusPipe = launch.statusFd ? child.stdio[3] : undefined
    statusPipe?.on("data", (c: Buffer) => {
      if (status.length < 64 * 1024) status += c.toString("utf8")
    })
    const timer = setTimeout(() => {
      timedOut = true
      killGroup(child)
    }, limitMs)
    child.on("error", (e) => {
      clearTimeout(timer)
      release?.()
      resume(Effect.fail(failed(tool)(e)))
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      killGroup(child) // reap anything it left running in its group
      release?.()
      resume(
        Effect.succeed({
          exitCode: code,
          signal,
          stdout: out,
          stderr: err,
          truncated,
          pid: child.pid,
          timedOut,
          status
        })
      )
    })
    // Interruption (cancellation, the tool runtime's timeout): kill the whole process group.
    return Effect.sync(() => {
      clearTimeout(timer)
      killGroup(child)
      release?.()
    })
  })

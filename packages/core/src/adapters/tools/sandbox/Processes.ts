/**
 * The live tool process groups of this process: who started each one (run, tool call, tool) and
 * when, and whether its tool call has ended. `Sandbox.spawn` tracks every group it starts (the
 * process-wide `shared` registry unless told otherwise); a tool that starts processes by other means
 * can `track` them too. The watchdog reads it to find a group that outlived its tool call (or its
 * run, or `maxAge`) — `tool_process_orphaned` — and, in `auto` mode, kills it (`kill`).
 *
 * A group is forgotten as soon as it is seen gone (`process.kill(-pgid, 0)` fails with `ESRCH`).
 * The registry is in memory: groups left behind by a crash of the daemon itself are not known to the
 * next process.
 *
 * @since 0.1.0
 */
import { readdirSync, readFileSync } from "node:fs"
import { Clock, Context, Effect } from "effect"

/** Who a process group belongs to. @since 0.1.0 @category Models */
export interface Owner {
  readonly tool: string
  readonly sessionId?: string | null | undefined
  readonly runId?: string | null | undefined
  readonly toolCallId?: string | null | undefined
}

/** One tracked process group. @since 0.1.0 @category Models */
export interface Group {
  /** The process group id (the leader's pid: tools start their children with `detached: true`). */
  readonly pgid: number
  readonly tool: string
  readonly sessionId: string | null
  readonly runId: string | null
  readonly toolCallId: string | null
  /** Epoch ms. */
  readonly startedAt: number
  /** When the tool call that started it ended (epoch ms), or `null` while it runs. */
  readonly callEndedAt: number | null
}

/** A tracked group: `release` says its tool call ended (the group is forgotten if it is gone). @since 0.1.0 @category Models */
export interface Tracked {
  readonly release: Effect.Effect<void>
}

/** @since 0.1.0 @category Models */
export interface Service {
  /** Track a process group started for a tool call. */
  readonly track: (pgid: number, owner: Owner) => Effect.Effect<Tracked>
  /** `track` for callers outside an Effect (a spawn callback): returns the `release`. */
  readonly unsafeTrack: (pgid: number, owner: Owner) => () => void
  /** The tracked groups still alive (the ones found gone are forgotten). */
  readonly live: Effect.Effect<ReadonlyArray<Group>>
  /** SIGKILL the whole group; `true` when it is gone afterwards (it is then forgotten). */
  readonly kill: (pgid: number) => Effect.Effect<boolean>
}

/** @since 0.1.0 @category Tags */
export class Processes extends Context.Tag("@palyra/core/Processes")<Processes, Service>() {}

/** The group's processes that are not zombies, read from Linux's `/proc` (`undefined` elsewhere). */
const runningMembers = (pgid: number): number | undefined => {
  if (process.platform !== "linux") return undefined
  let n = 0
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      // pid (comm) state ppid pgrp …: comm may hold spaces and parentheses, so split after the last ')'.
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (Number(pgrp) === pgid && state !== "Z" && state !== "X") n++
    } catch {
      // the process ended while we looked
    }
  }
  return n
}

/**
 * Whether any process of the group is still running (`EPERM` counts: it exists, we may not signal
 * it). On Linux a group of zombies only (dead, waiting for a parent that does not reap them, e.g. a
 * container's init) is not running.
 *
 * @since 0.1.0
 * @category Utils
 */
export const groupAlive = (pgid: number): boolean => {
  try {
    process.kill(-pgid, 0)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EPERM") return false
  }
  const running = runningMembers(pgid)
  return running === undefined || running > 0
}

/** A fresh, empty registry. @since 0.1.0 @category Constructors */
export const make = (): Service => {
  const groups = new Map<number, Group>()
  const register = (pgid: number, owner: Owner, startedAt: number) => {
    const group: Group = {
      pgid,
      tool: owner.tool,
      sessionId: owner.sessionId ?? null,
      runId: owner.runId ?? null,
      toolCallId: owner.toolCallId ?? null,
      startedAt,
      callEndedAt: null
    }
    groups.set(pgid, group)
    return () => {
      if (groups.get(pgid) !== group) return
      if (groupAlive(pgid)) groups.set(pgid, { ...group, callEndedAt: Date.now() })
      else groups.delete(pgid)
    }
  }
  const prune = () => {
    for (const pgid of [...groups.keys()]) if (!groupAlive(pgid)) groups.delete(pgid)
  }
  return {
    track: (pgid, owner) =>
      Effect.map(Clock.currentTimeMillis, (now) => ({ release: Effect.sync(register(pgid, owner, now)) })),
    unsafeTrack: (pgid, owner) => register(pgid, owner, Date.now()),
    live: Effect.sync(() => {
      prune()
      return [...groups.values()]
    }),
    kill: (pgid) =>
      Effect.gen(function* () {
        try {
          process.kill(-pgid, "SIGKILL")
        } catch {
          // gone already, or not ours to signal (checked below)
        }
        // SIGKILL is delivered asynchronously: give the kernel a moment before looking again.
        for (let i = 0; i < 20 && groupAlive(pgid); i++) yield* Effect.sleep("10 millis")
        const gone = !groupAlive(pgid)
        if (gone) groups.delete(pgid)
        return gone
      }).pipe(Effect.withSpan("Processes.kill", { attributes: { pgid } }))
  }
}

/** The process-wide registry `Sandbox.spawn` uses unless given another. @since 0.1.0 @category Constructors */
export const shared: Service = make()

/**
 * The live tool process groups of this process: who started each one (run, tool call, tool) and
 * when, and whether its tool call has ended. `Sandbox.spawn` tracks every group it starts (the
 * process-wide `shared` registry unless told otherwise); a tool that starts processes by other means
 * can `track` them too. The watchdog reads it to find a group that outlived its tool call (or its
 * run, or `maxAge`) — `tool_process_orphaned` — and, in `auto` mode, kills it (`kill`).
 *
 * A group is forgotten as soon as it is seen gone. Group ids are numbers the kernel hands out again,
 * so an entry also records the leader's start time (`/proc/<pid>/stat`): a number now held by
 * another group (the pid counter wrapped between two looks) is forgotten, never reported or killed.
 * Without `/proc` (not Linux) a group's identity cannot be told: it is reported, never killed.
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
  /**
   * The leader's start time when tracked (`/proc/<pid>/stat` field 22, clock ticks since boot), which
   * tells this group from a later one given the same number; `null` where it could not be read.
   */
  readonly leaderStart: string | null
}

/** A tracked group: `release` says its tool call ended (the group is forgotten if it is gone). @since 0.1.0 @category Models */
export interface Tracked {
  readonly release: Effect.Effect<void>
}

/** @since 0.1.0 @category Models */
export interface Service {
  /**
   * Track a process group started for a tool call. `leaderStart` is the leader's `startTime` if the
   * caller recorded it at spawn (read now otherwise).
   */
  readonly track: (pgid: number, owner: Owner, leaderStart?: string) => Effect.Effect<Tracked>
  /** `track` for callers outside an Effect (a spawn callback): returns the `release`. */
  readonly unsafeTrack: (pgid: number, owner: Owner, leaderStart?: string) => () => void
  /**
   * The tracked groups still alive and still the ones tracked; the ones found gone — or whose number
   * another group holds now — are forgotten.
   */
  readonly live: Effect.Effect<ReadonlyArray<Group>>
  /**
   * SIGKILL the whole tracked group after checking it is still the one tracked; `true` when it is
   * gone afterwards (it is then forgotten), including when its number turned out to be another
   * group's (that group is left alone). Without `/proc` (not Linux) it never kills: `false`.
   */
  readonly kill: (pgid: number) => Effect.Effect<boolean>
}

/** @since 0.1.0 @category Tags */
export class Processes extends Context.Tag("@palyra/core/Processes")<Processes, Service>() {}

/** One `/proc/<pid>/stat` line, parsed: `undefined` when it is not one. */
const parseStat = (
  stat: string
): { readonly state: string; readonly pgrp: number; readonly start: string } | undefined => {
  // pid (comm) state ppid pgrp … starttime (field 22) …: comm may hold spaces and parentheses, so
  // split after the last ')'; the rest starts at field 3.
  const close = stat.lastIndexOf(")")
  if (close < 0) return undefined
  const fields = stat.slice(close + 2).split(" ")
  const [state, , pgrp] = fields
  const start = fields[19]
  if (state === undefined || pgrp === undefined || start === undefined || !/^\d+$/.test(start)) return undefined
  return { state, pgrp: Number(pgrp), start }
}

/** Whether this platform has Linux's `/proc` to tell a process's identity (elsewhere: never kill). */
const hasProc = process.platform === "linux"

/**
 * A process's start time (`/proc/<pid>/stat` field 22, clock ticks since boot) as a decimal string,
 * or `undefined` when no process holds the pid or there is no `/proc`. A zombie still holds its pid
 * (a leader that exited before it was tracked), so it has one. With the pid it names one process for
 * the life of the machine: a reused pid has a later start time.
 *
 * @since 0.1.0
 * @category Utils
 */
export const startTime = (pid: number): string | undefined => {
  if (!hasProc) return undefined
  try {
    const stat = parseStat(readFileSync(`/proc/${pid}/stat`, "utf8"))
    return stat?.start
  } catch {
    return undefined
  }
}

/** The group's running (not zombie) processes as `pid:starttime`, read from `/proc` (`undefined` without it). */
const runningMembers = (pgid: number): ReadonlySet<string> | undefined => {
  if (!hasProc) return undefined
  const members = new Set<string>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = parseStat(readFileSync(`/proc/${entry}/stat`, "utf8"))
      if (stat !== undefined && stat.pgrp === pgid && stat.state !== "Z" && stat.state !== "X")
        members.add(`${entry}:${stat.start}`)
    } catch {
      // the process ended while we looked
    }
  }
  return members
}

/**
 * Whether any process of the group is still running (`EPERM` counts: it exists, we may not signal
 * it). On Linux a group of zombies only (dead, waiting for a parent that does not reap them, e.g. a
 * container's init) is not running. This says nothing about *which* group holds the number: the
 * registry checks that with the leader's start time.
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
  return running === undefined || running.size > 0
}

/** A registry entry: the group, and what identifies it as the one we started. */
interface Entry {
  readonly group: Group
  /** The processes (`pid:starttime`) seen in it when it was last confirmed ours. */
  readonly members: ReadonlySet<string>
}

/**
 * Whether the group numbered `entry.group.pgid` is still the one we tracked: `"ours"` (with its
 * members now), `"gone"` (no process holds the number, or another group does), or `"unknown"` where
 * there is no `/proc` (it is alive, but who it is cannot be told: report it, never kill it).
 *
 * A pid is not handed out again while a process group of that number has members, so the group is
 * ours while its leader runs with the start time we recorded, or — its leader gone — while one of
 * the members seen at the last confirmation still runs. `adopt` (used when the tool call releases the
 * group, right as its leader exits) also accepts members that started no earlier than the leader:
 * the processes it left behind in its group.
 */
const identify = (
  entry: Entry,
  adopt = false
): { readonly _tag: "ours"; readonly members: ReadonlySet<string> } | { readonly _tag: "gone" | "unknown" } => {
  const { pgid, leaderStart } = entry.group
  const members = runningMembers(pgid)
  if (members === undefined) return groupAlive(pgid) ? { _tag: "unknown" } : { _tag: "gone" }
  if (members.size === 0) return { _tag: "gone" }
  const leader = [...members].find((m) => m.startsWith(`${pgid}:`))
  if (leader !== undefined) return leader === `${pgid}:${leaderStart}` ? { _tag: "ours", members } : { _tag: "gone" }
  const continued = [...members].some(
    (m) =>
      entry.members.has(m) ||
      (adopt && leaderStart !== null && BigInt(m.slice(m.indexOf(":") + 1)) >= BigInt(leaderStart))
  )
  return continued ? { _tag: "ours", members } : { _tag: "gone" }
}

/** A fresh, empty registry. @since 0.1.0 @category Constructors */
export const make = (): Service => {
  const groups = new Map<number, Entry>()
  const register = (pgid: number, owner: Owner, startedAt: number, leaderStart: string | undefined) => {
    const group: Group = {
      pgid,
      tool: owner.tool,
      sessionId: owner.sessionId ?? null,
      runId: owner.runId ?? null,
      toolCallId: owner.toolCallId ?? null,
      startedAt,
      callEndedAt: null,
      leaderStart: leaderStart ?? startTime(pgid) ?? null
    }
    const entry: Entry = { group, members: new Set(group.leaderStart === null ? [] : [`${pgid}:${group.leaderStart}`]) }
    groups.set(pgid, entry)
    return () => {
      if (groups.get(pgid) !== entry) return
      const now = identify(entry, true)
      if (now._tag === "gone") groups.delete(pgid)
      else
        groups.set(pgid, {
          group: { ...group, callEndedAt: Date.now() },
          members: now._tag === "ours" ? now.members : entry.members
        })
    }
  }
  /** Re-identify every entry: keep (and refresh) the ones still ours, drop the gone. */
  const prune = () => {
    for (const [pgid, entry] of [...groups]) {
      const now = identify(entry)
      if (now._tag === "gone") groups.delete(pgid)
      else if (now._tag === "ours") groups.set(pgid, { ...entry, members: now.members })
    }
  }
  return {
    track: (pgid, owner, leaderStart) =>
      Effect.map(Clock.currentTimeMillis, (now) => ({ release: Effect.sync(register(pgid, owner, now, leaderStart)) })),
    unsafeTrack: (pgid, owner, leaderStart) => register(pgid, owner, Date.now(), leaderStart),
    live: Effect.sync(() => {
      prune()
      return [...groups.values()].map((e) => e.group)
    }),
    kill: (pgid) =>
      Effect.gen(function* () {
        const entry = groups.get(pgid)
        if (entry === undefined) return !groupAlive(pgid) // not ours to kill
        const now = identify(entry)
        if (now._tag === "gone") {
          groups.delete(pgid)
          yield* Effect.logInfo("Processes.kill: the group is gone (or its number is another group's now)").pipe(
            Effect.annotateLogs({ pgid })
          )
          return true
        }
        if (now._tag === "unknown") {
          yield* Effect.logWarning("Processes.kill: no /proc to tell the group's identity; not killing").pipe(
            Effect.annotateLogs({ pgid })
          )
          return false
        }
        // Checked just above, signalled here with nothing in between: the window in which the group
        // could die and its number be reused is this one synchronous step. A pidfd would close it
        // fully, but Node has no pidfd API.
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

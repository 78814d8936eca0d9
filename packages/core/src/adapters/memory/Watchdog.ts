/**
 * The watchdog: turns missing heartbeats into journaled incidents and, in `auto` mode, remediations.
 *
 * | incident | heartbeat it watches | `auto` remediation |
 * | --- | --- | --- |
 * | `run_stalled` | a running run's latest tape event (model turns, tool calls) older than `runStallAfter` | cancel the run through the Gateway as an operator, with the reason noted on its tape |
 * | `task_lease_expired` | a running background task whose lease ran out (its worker stopped heartbeating) | requeue it (`TaskQueue.sweep`) |
 * | `approval_pending` | an approval pending longer than `approvalWarnAfter` (and not expired) | a `SessionNote` on its session asking approvers to decide |
 * | `journal_stall` | a journal append (through `JournalProbe`) in flight, or finished, after more than `journalStallAfter` | none (it is reported) |
 * | `tool_process_orphaned` | a tool process group (tracked in `Processes`) still running after its tool call ended (the call released it, its `ToolResult` is on the tape, or its run is terminal), or older than `processMaxAge` | SIGKILL to the whole group (`-pgid`), noted on the run's tape |
 *
 * Modes: `off` (nothing runs), `observe` (incidents only), `auto` (incidents and remediations).
 * There is one open incident per subject; it is resolved when the condition clears. An `auto`
 * watchdog also remediates an incident an observing one opened (and records that it did). Incidents are
 * journaled as `SessionNote`s (author `watchdog`) on a system session owned by the watchdog's
 * principal (key `watchdog.incidents`, created with the first incident), so they are durable, hash-chained like every tape event, and
 * reloaded at start; notes about a run or an approval also go on that session's tape. The
 * `palyra_incidents_open` gauge counts open incidents. Listing needs an operator.
 *
 * Tool process groups are known from this process's `Processes` registry (every `Sandbox.spawn`
 * tracks its group): groups left behind by a crash of an earlier daemon process are not seen.
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Either, Layer, Metric, Option, Schedule, Schema, type Scope } from "effect"
import * as Caller from "../../domain/Caller.js"
import { type JournalError, PermissionDenied } from "../../domain/Errors.js"
import type { RunId, SessionId } from "../../domain/Ids.js"
import { ulid } from "../../domain/Ids.js"
import { isTerminal } from "../../domain/RunState.js"
import type { TapeEvent } from "../../domain/TapeEvent.js"
import * as Gateway from "../../kernel/Gateway.js"
import { Journal, type Service as JournalService } from "../../ports/Journal.js"
import { TaskQueue, type Service as TaskQueueService } from "../../ports/TaskQueue.js"
import * as Processes from "../tools/sandbox/Processes.js"

// =============================================================================================
// Models
// =============================================================================================

/** @since 0.1.0 @category Models */
export type Mode = "off" | "observe" | "auto"

/** @since 0.1.0 @category Models */
export const IncidentKind = Schema.Literal(
  "run_stalled",
  "task_lease_expired",
  "approval_pending",
  "journal_stall",
  "tool_process_orphaned"
)
/** @since 0.1.0 @category Models */
export type IncidentKind = typeof IncidentKind.Type

/** @since 0.1.0 @category Models */
export const Incident = Schema.Struct({
  id: Schema.String,
  kind: IncidentKind,
  /** The run, task or approval id, `journal`, or `pgid:<n>` (a tool process group). */
  subject: Schema.String,
  sessionId: Schema.NullOr(Schema.String),
  openedAt: Schema.Number,
  detail: Schema.String,
  /** What the watchdog did about it. */
  action: Schema.Literal("none", "cancelled", "requeued", "notified", "killed", "remediation_failed"),
  state: Schema.Literal("open", "resolved"),
  resolvedAt: Schema.NullOr(Schema.Number)
})
/** @since 0.1.0 @category Models */
export type Incident = typeof Incident.Type

/** @since 0.1.0 @category Models */
export interface IncidentFilter {
  readonly state?: Incident["state"] | undefined
  readonly kind?: IncidentKind | undefined
  readonly limit?: number | undefined
}

/** Open incidents (by the watchdog). @since 0.1.0 @category Metrics */
export const incidentsOpen = Metric.gauge("palyra_incidents_open", { description: "Watchdog incidents still open" })

// =============================================================================================
// Journal probe
// =============================================================================================

/** Times journal appends, so the watchdog can see a writer that stalls. @since 0.1.0 @category Models */
export interface JournalProbe {
  /** The same journal, with every `append` timed. */
  readonly wrap: (journal: JournalService) => JournalService
  /** When the oldest append still in flight started (epoch ms), if any. */
  readonly oldestInFlight: () => number | undefined
  /** The slowest append that finished since the last call (and when it finished), then forgets it. */
  readonly takeSlowest: () => { readonly ms: number; readonly at: number } | undefined
}

/** @since 0.1.0 @category Tags */
export class Probe extends Context.Tag("@palyra/core/Watchdog/JournalProbe")<Probe, JournalProbe>() {}

/** A fresh probe. @since 0.1.0 @category Constructors */
export const makeProbe = (): JournalProbe => {
  const inFlight = new Map<number, number>()
  let next = 0
  let slowest: { ms: number; at: number } | undefined
  return {
    wrap: (journal) => ({
      ...journal,
      append: (sessionId, events, effects) =>
        Effect.flatMap(Clock.currentTimeMillis, (start) => {
          const id = next++
          inFlight.set(id, start)
          return journal.append(sessionId, events, effects).pipe(
            Effect.ensuring(
              Effect.map(Clock.currentTimeMillis, (end) => {
                inFlight.delete(id)
                if (slowest === undefined || end - start > slowest.ms) slowest = { ms: end - start, at: end }
              })
            )
          )
        })
    }),
    oldestInFlight: () => {
      let oldest: number | undefined
      for (const t of inFlight.values()) if (oldest === undefined || t < oldest) oldest = t
      return oldest
    },
    takeSlowest: () => {
      const s = slowest
      slowest = undefined
      return s
    }
  }
}

/**
 * Wrap a journal layer with a probe: the output is the timed `Journal` and the `Probe` the
 * watchdog reads.
 *
 * @since 0.1.0
 * @category Layers
 */
export const probed = <E, R>(journal: Layer.Layer<Journal, E, R>): Layer.Layer<Journal | Probe, E, R> =>
  Layer.effectContext(
    Effect.map(Journal, (inner) => {
      const probe = makeProbe()
      return Context.make(Journal, probe.wrap(inner)).pipe(Context.add(Probe, probe))
    })
  ).pipe(Layer.provide(journal))

// =============================================================================================
// The watchdog
// =============================================================================================

/** @since 0.1.0 @category Models */
export interface Options {
  /** Default `observe`. */
  readonly mode?: Mode | undefined
  /** How often `run` checks (default 15 seconds). */
  readonly interval?: Duration.DurationInput | undefined
  /** A running run with no tape event for this long is stalled (default 10 minutes). */
  readonly runStallAfter?: Duration.DurationInput | undefined
  /** An approval pending this long raises an incident (default 5 minutes). */
  readonly approvalWarnAfter?: Duration.DurationInput | undefined
  /** A journal append slower than this is a stall (default 5 seconds). */
  readonly journalStallAfter?: Duration.DurationInput | undefined
  /** A tool process group running this long is orphaned even while its call runs (default 2 hours). */
  readonly processMaxAge?: Duration.DurationInput | undefined
  /** The operator principal the watchdog acts as (default `system:watchdog`). */
  readonly principal?: string | undefined
  /** How notes are appended (default `journal.append`; the Gateway's tape append shows them live). */
  readonly append?: JournalService["append"] | undefined
}

/** @since 0.1.0 @category Models */
export interface Deps {
  readonly gateway: Gateway.Service
  readonly journal: JournalService
  readonly queue?: TaskQueueService | undefined
  readonly probe?: JournalProbe | undefined
  /** The tool process groups to watch (none when absent). */
  readonly processes?: Processes.Service | undefined
}

/** @since 0.1.0 @category Models */
export interface Service {
  readonly mode: Mode
  /** One sweep now: returns the incidents it opened. */
  readonly check: Effect.Effect<ReadonlyArray<Incident>>
  /** Incidents, newest first (operators only). */
  readonly incidents: (
    caller: Caller.Caller,
    filter?: IncidentFilter
  ) => Effect.Effect<ReadonlyArray<Incident>, PermissionDenied>
  /** Check every `interval` until the scope closes (nothing in mode `off`). */
  readonly run: Effect.Effect<void, never, Scope.Scope>
}

/** @since 0.1.0 @category Tags */
export class Watchdog extends Context.Tag("@palyra/core/Watchdog")<Watchdog, Service>() {}

const OPENED = "incident opened: "
const ACTED = "incident acted on: "
const RESOLVED = "incident resolved: "
const Resolution = Schema.Struct({ id: Schema.String, resolvedAt: Schema.Number })
const Acted = Schema.Struct({ id: Schema.String, action: Incident.fields.action })
const decodeIncident = Schema.decodeUnknownEither(Schema.parseJson(Incident))
const decodeResolution = Schema.decodeUnknownEither(Schema.parseJson(Resolution))
const decodeActed = Schema.decodeUnknownEither(Schema.parseJson(Acted))
/**
 * The incidents a watchdog journaled on its log's tape (opened, acted on, resolved), oldest first.
 *
 * @since 0.1.0
 * @category Utils
 */
export const replay = (tape: ReadonlyArray<TapeEvent>): ReadonlyArray<Incident> => {
  const incidents = new Map<string, Incident>()
  for (const e of tape) {
    if (e._tag !== "SessionNote" || e.author !== "watchdog") continue
    if (e.text.startsWith(OPENED)) {
      const decoded = decodeIncident(e.text.slice(OPENED.length))
      if (Either.isRight(decoded)) incidents.set(decoded.right.id, decoded.right)
    } else if (e.text.startsWith(ACTED)) {
      const decoded = decodeActed(e.text.slice(ACTED.length))
      const found = Either.isRight(decoded) ? incidents.get(decoded.right.id) : undefined
      if (found !== undefined && Either.isRight(decoded)) {
        incidents.set(found.id, { ...found, action: decoded.right.action })
      }
    } else if (e.text.startsWith(RESOLVED)) {
      const decoded = decodeResolution(e.text.slice(RESOLVED.length))
      const found = Either.isRight(decoded) ? incidents.get(decoded.right.id) : undefined
      if (found !== undefined && Either.isRight(decoded)) {
        incidents.set(found.id, { ...found, state: "resolved", resolvedAt: decoded.right.resolvedAt })
      }
    }
  }
  return [...incidents.values()]
}

/** The key of the watchdog's incident log session (owned by its principal). @since 0.1.0 @category Models */
export const LOG_KEY = "watchdog.incidents"

/** The principal the watchdog acts as by default. @since 0.1.0 @category Models */
export const DEFAULT_PRINCIPAL = "system:watchdog"

/**
 * The incidents journaled by the watchdog of `principal` (default `DEFAULT_PRINCIPAL`), read from a
 * journal without a Gateway (e.g. `palyra doctor` on a read-only journal).
 *
 * @since 0.1.0
 * @category Utils
 */
export const readIncidents = (
  journal: JournalService,
  principal: string = DEFAULT_PRINCIPAL
): Effect.Effect<ReadonlyArray<Incident>, JournalError> =>
  Effect.flatMap(
    journal.findSessionByKey(principal, LOG_KEY),
    Option.match({
      onNone: () => Effect.succeed([]),
      onSome: (session) => Effect.map(journal.readTape(session.id, { afterSeq: 0 }), replay)
    })
  )

const fmt = (ms: number) =>
  Duration.format(Duration.millis(ms >= 10_000 ? Math.round(ms / 1000) * 1000 : Math.round(ms)))
const MAX_RESOLVED_KEPT = 1_000

/**
 * Build a watchdog; it reloads the incidents it journaled before. Start its loop with `run`.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (deps: Deps, options: Options = {}): Effect.Effect<Service> =>
  Effect.gen(function* () {
    const mode = options.mode ?? "observe"
    const { gateway, journal } = deps
    const append = options.append ?? journal.append
    const operator = Caller.operator(options.principal ?? DEFAULT_PRINCIPAL)
    const runStallMs = Duration.toMillis(Duration.decode(options.runStallAfter ?? "10 minutes"))
    const approvalWarnMs = Duration.toMillis(Duration.decode(options.approvalWarnAfter ?? "5 minutes"))
    const journalStallMs = Duration.toMillis(Duration.decode(options.journalStallAfter ?? "5 seconds"))
    const interval = Duration.decode(options.interval ?? "15 seconds")
    const processMaxMs = Duration.toMillis(Duration.decode(options.processMaxAge ?? "2 hours"))

    const incidents = new Map<string, Incident>()
    const openBySubject = new Map<string, string>()
    const key = (kind: IncidentKind, subject: string) => `${kind}/${subject}`
    const gauge = Effect.suspend(() => Metric.set(incidentsOpen, openBySubject.size))

    // ---- the incident log: a system session, created with the first incident ----------------------
    const loaded = yield* Effect.cached(
      journal.findSessionByKey(operator.principal, LOG_KEY).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.succeedNone, onSome: (session) => reload(session) })),
        Effect.catchAll((e) =>
          Effect.as(Effect.logError("watchdog: the incident log is unavailable", e), Option.none<SessionId>())
        )
      )
    )
    const reload = (session: { readonly id: SessionId }) =>
      Effect.map(journal.readTape(session.id, { afterSeq: 0 }), (tape) => {
        for (const incident of replay(tape)) {
          incidents.set(incident.id, incident)
          if (incident.state === "open") openBySubject.set(key(incident.kind, incident.subject), incident.id)
        }
        return Option.some(session.id)
      })
    const logSession = yield* Effect.cached(
      Effect.flatMap(loaded, (found) =>
        Option.isSome(found)
          ? Effect.succeed(found)
          : gateway.resolveSession(operator, { key: LOG_KEY, title: "Watchdog incidents" }).pipe(
              Effect.map((s) => Option.some(s.id)),
              Effect.catchAll((e) =>
                Effect.as(Effect.logError("watchdog: the incident log is unavailable", e), Option.none<SessionId>())
              )
            )
      )
    )
    const noteOn = (sessionId: SessionId, runId: RunId | null, text: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        append(sessionId, [{ _tag: "SessionNote", sessionId, runId, at, author: "watchdog", text }])
      ).pipe(
        Effect.asVoid,
        Effect.catchAll((e) => Effect.logWarning("watchdog: could not write a note", e))
      )
    const log = (text: string) =>
      Effect.flatMap(logSession, Option.match({ onNone: () => Effect.void, onSome: (id) => noteOn(id, null, text) }))

    const open = (fields: Omit<Incident, "id" | "openedAt" | "state" | "resolvedAt">) =>
      Effect.gen(function* () {
        const incident: Incident = {
          ...fields,
          id: yield* ulid,
          openedAt: yield* Clock.currentTimeMillis,
          state: "open",
          resolvedAt: null
        }
        incidents.set(incident.id, incident)
        openBySubject.set(key(incident.kind, incident.subject), incident.id)
        yield* log(`${OPENED}${JSON.stringify(incident)}`)
        yield* Effect.logWarning(`watchdog incident: ${incident.kind} ${incident.subject}: ${incident.detail}`)
        return incident
      })
    const resolve = (incident: Incident) =>
      Effect.gen(function* () {
        const resolvedAt = yield* Clock.currentTimeMillis
        incidents.set(incident.id, { ...incident, state: "resolved", resolvedAt })
        openBySubject.delete(key(incident.kind, incident.subject))
        yield* log(`${RESOLVED}${JSON.stringify({ id: incident.id, resolvedAt })}`)
      })
    /** Record what was done about an incident opened earlier (e.g. by an observing watchdog). */
    const acted = (incident: Incident, action: Incident["action"]) =>
      Effect.gen(function* () {
        incidents.set(incident.id, { ...incident, action })
        yield* log(`${ACTED}${JSON.stringify({ id: incident.id, action })}`)
      })
    /**
     * What a condition needs: an incident when none is open; in `auto` mode a remediation, unless one
     * was already done for the open incident.
     */
    const needs = (kind: IncidentKind, subject: string) => {
      const current = openFor(kind, subject)
      return { current, remediate: mode === "auto" && (current === undefined || current.action === "none") }
    }
    const openFor = (kind: IncidentKind, subject: string) => {
      const id = openBySubject.get(key(kind, subject))
      return id === undefined ? undefined : incidents.get(id)
    }
    /** Resolve the open incidents of `kind` whose subject is not in `still`. */
    const resolveCleared = (kind: IncidentKind, still: ReadonlySet<string>) =>
      Effect.forEach(
        [...incidents.values()].filter((i) => i.kind === kind && i.state === "open" && !still.has(i.subject)),
        resolve,
        { discard: true }
      )

    // ---- runs -----------------------------------------------------------------------------------
    const lastProgress = (runId: RunId, sessionId: SessionId, fallback: number) =>
      Effect.gen(function* () {
        const head = yield* journal.headSeq(sessionId)
        const page = yield* journal.readTape(sessionId, { afterSeq: Math.max(0, head - 32) })
        const last = page.findLast((e) => e.runId === runId && !(e._tag === "SessionNote" && e.author === "watchdog"))
        return last?.at ?? fallback
      })

    const checkRuns = (now: number) =>
      Effect.gen(function* () {
        const opened: Array<Incident> = []
        const stalled = new Set<string>()
        for (const run of yield* journal.listRuns({ states: ["InProgress"] })) {
          const since = yield* lastProgress(run.id, run.sessionId, run.updatedAt)
          if (now - since <= runStallMs) continue
          stalled.add(run.id)
          const { current, remediate } = needs("run_stalled", run.id)
          if (current !== undefined && !remediate) continue
          const detail = `run ${run.id} made no progress for ${fmt(now - since)} (limit ${fmt(runStallMs)})`
          let action: Incident["action"] = "none"
          if (remediate) {
            yield* noteOn(run.sessionId, run.id, `watchdog: ${detail}: cancelling it`)
            const cancelled = yield* Effect.either(gateway.cancelRun(operator, run.id))
            action = Either.isRight(cancelled) ? "cancelled" : "remediation_failed"
          }
          if (current !== undefined) yield* acted(current, action)
          else
            opened.push(yield* open({ kind: "run_stalled", subject: run.id, sessionId: run.sessionId, detail, action }))
        }
        yield* resolveCleared("run_stalled", stalled)
        return opened
      })

    // ---- background tasks -------------------------------------------------------------------------
    const checkTasks = (queue: TaskQueueService) =>
      Effect.gen(function* () {
        const opened: Array<Incident> = []
        const expired = yield* queue.expiredLeases
        const still = new Set(expired.map((t) => t.id))
        const todo = expired.map((task) => ({ task, ...needs("task_lease_expired", task.id) }))
        const requeued = todo.some((t) => t.remediate)
          ? yield* Effect.either(queue.sweep(operator.principal))
          : undefined
        const action: Incident["action"] =
          requeued === undefined ? "none" : Either.isRight(requeued) ? "requeued" : "remediation_failed"
        for (const { task, current, remediate } of todo) {
          if (current !== undefined) {
            if (remediate) yield* acted(current, action)
            continue
          }
          const detail = `task ${task.id} (${task.kind}, attempt ${task.attempts}) lost its lease: its worker (${task.leaseOwner ?? "?"}) stopped heartbeating`
          opened.push(yield* open({ kind: "task_lease_expired", subject: task.id, sessionId: null, detail, action }))
        }
        if (requeued !== undefined && Either.isRight(requeued)) {
          for (const t of requeued.right) still.delete(t.id)
        }
        yield* resolveCleared("task_lease_expired", still)
        return opened
      })

    // ---- approvals --------------------------------------------------------------------------------
    const checkApprovals = (now: number) =>
      Effect.gen(function* () {
        const opened: Array<Incident> = []
        const waiting = new Set<string>()
        for (const a of yield* journal.listApprovals({ status: "pending" })) {
          if (now >= a.expiresAt || now - a.requestedAt < approvalWarnMs) continue
          waiting.add(a.id)
          const { current, remediate } = needs("approval_pending", a.id)
          if (current !== undefined && !remediate) continue
          const detail = `approval ${a.id} for ${a.tool} (run ${a.runId}) has been pending for ${fmt(now - a.requestedAt)}; it expires in ${fmt(a.expiresAt - now)}`
          let action: Incident["action"] = "none"
          if (remediate) {
            yield* noteOn(a.sessionId, a.runId, `watchdog: ${detail}. Approvers: please approve or deny it.`)
            action = "notified"
          }
          if (current !== undefined) yield* acted(current, action)
          else
            opened.push(
              yield* open({ kind: "approval_pending", subject: a.id, sessionId: a.sessionId, detail, action })
            )
        }
        yield* resolveCleared("approval_pending", waiting)
        return opened
      })

    // ---- the journal writer -------------------------------------------------------------------------
    const checkJournal = (probe: JournalProbe, now: number) =>
      Effect.gen(function* () {
        const oldest = probe.oldestInFlight()
        const slowest = probe.takeSlowest()
        const detail =
          oldest !== undefined && now - oldest > journalStallMs
            ? `a journal append has been in flight for ${fmt(now - oldest)} (limit ${fmt(journalStallMs)})`
            : slowest !== undefined && slowest.ms > journalStallMs
              ? `a journal append took ${fmt(slowest.ms)} (limit ${fmt(journalStallMs)})`
              : undefined
        const current = openFor("journal_stall", "journal")
        if (detail === undefined) {
          if (current !== undefined) yield* resolve(current)
          return []
        }
        if (current !== undefined) return []
        return [yield* open({ kind: "journal_stall", subject: "journal", sessionId: null, detail, action: "none" })]
      })

    // ---- tool process groups -----------------------------------------------------------------------
    /** Why a live group is orphaned, or `undefined` while its tool call may still need it. */
    const orphaned = (g: Processes.Group, now: number) =>
      Effect.gen(function* () {
        const who = `process group ${g.pgid} of ${g.tool}${g.toolCallId === null ? "" : ` (call ${g.toolCallId})`}${g.runId === null ? "" : ` in run ${g.runId}`}`
        if (g.callEndedAt !== null)
          return `${who} is still running ${fmt(now - g.callEndedAt)} after its tool call ended`
        if (g.runId !== null) {
          const run = yield* journal.getRun(g.runId as RunId)
          if (Option.isSome(run) && isTerminal(run.value.state)) {
            return `${who} is still running after its run ended (${run.value.state})`
          }
          if (Option.isSome(run) && g.toolCallId !== null) {
            const head = yield* journal.headSeq(run.value.sessionId)
            const page = yield* journal.readTape(run.value.sessionId, { afterSeq: Math.max(0, head - 256) })
            if (page.some((e) => e._tag === "ToolResult" && e.toolCallId === g.toolCallId)) {
              return `${who} is still running after its tool call returned`
            }
          }
        }
        if (now - g.startedAt > processMaxMs)
          return `${who} has been running for ${fmt(now - g.startedAt)} (limit ${fmt(processMaxMs)})`
        return undefined
      })

    const checkProcesses = (registry: Processes.Service, now: number) =>
      Effect.gen(function* () {
        const opened: Array<Incident> = []
        const still = new Set<string>()
        for (const g of yield* registry.live) {
          const detail = yield* orphaned(g, now)
          if (detail === undefined) continue
          const subject = `pgid:${g.pgid}`
          still.add(subject)
          const { current, remediate } = needs("tool_process_orphaned", subject)
          if (current !== undefined && !remediate) continue
          let action: Incident["action"] = "none"
          if (remediate) {
            // `kill` checks the group is still the one tracked right before signalling it: a number
            // another group took since `live` is forgotten, never signalled (see `Processes`).
            action = (yield* registry.kill(g.pgid)) ? "killed" : "remediation_failed"
            if (g.sessionId !== null) {
              yield* noteOn(
                g.sessionId as SessionId,
                g.runId as RunId | null,
                `watchdog: ${detail}: ${action === "killed" ? "killed the process group" : "could not kill the process group"}`
              )
            }
          }
          if (current !== undefined) yield* acted(current, action)
          else
            opened.push(yield* open({ kind: "tool_process_orphaned", subject, sessionId: g.sessionId, detail, action }))
        }
        yield* resolveCleared("tool_process_orphaned", still)
        return opened
      })

    const trim = Effect.sync(() => {
      const resolved = [...incidents.values()].filter((i) => i.state === "resolved")
      for (const i of resolved.slice(0, Math.max(0, resolved.length - MAX_RESOLVED_KEPT))) incidents.delete(i.id)
    })

    const check: Service["check"] =
      mode === "off"
        ? Effect.succeed([])
        : Effect.gen(function* () {
            yield* loaded
            const now = yield* Clock.currentTimeMillis
            const guard = (name: string, e: Effect.Effect<ReadonlyArray<Incident>, unknown>) =>
              e.pipe(
                Effect.catchAllCause((cause) =>
                  Effect.as(Effect.logError(`watchdog: the ${name} check failed`, cause), [] as ReadonlyArray<Incident>)
                )
              )
            const opened = [
              ...(yield* guard("run", checkRuns(now))),
              ...(deps.queue === undefined ? [] : yield* guard("task", checkTasks(deps.queue))),
              ...(yield* guard("approval", checkApprovals(now))),
              ...(deps.probe === undefined ? [] : yield* guard("journal", checkJournal(deps.probe, now))),
              ...(deps.processes === undefined ? [] : yield* guard("process", checkProcesses(deps.processes, now)))
            ]
            yield* trim
            yield* gauge
            return opened
          }).pipe(Effect.withSpan("Watchdog.check"))

    return {
      mode,
      check,
      incidents: (caller, filter = {}) =>
        caller.operator
          ? Effect.zipRight(
              loaded,
              Effect.sync(() => {
                const out = [...incidents.values()]
                  .filter(
                    (i) =>
                      (filter.state === undefined || i.state === filter.state) &&
                      (filter.kind === undefined || i.kind === filter.kind)
                  )
                  .sort((a, b) => (a.id < b.id ? 1 : -1))
                return filter.limit === undefined ? out : out.slice(0, Math.max(0, filter.limit))
              })
            )
          : Effect.fail(new PermissionDenied({ message: "watchdog incidents need an operator" })),
      run:
        mode === "off" ? Effect.void : Effect.asVoid(Effect.forkScoped(Effect.repeat(check, Schedule.spaced(interval))))
    }
  })

/**
 * The watchdog over the context's Gateway and Journal (and `TaskQueue` and `Probe` when present),
 * watching the context's `Processes` registry (default `Processes.shared`), its loop running for the
 * layer's lifetime.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (options: Options = {}): Layer.Layer<Watchdog, never, Gateway.Gateway | Journal> =>
  Layer.scoped(
    Watchdog,
    Effect.gen(function* () {
      const queue = yield* Effect.serviceOption(TaskQueue)
      const probe = yield* Effect.serviceOption(Probe)
      const processes = yield* Effect.serviceOption(Processes.Processes)
      const service = yield* make(
        {
          gateway: yield* Gateway.Gateway,
          journal: yield* Journal,
          queue: Option.getOrUndefined(queue),
          probe: Option.getOrUndefined(probe),
          processes: Option.getOrElse(processes, () => Processes.shared)
        },
        options
      )
      yield* service.run
      return service
    })
  )

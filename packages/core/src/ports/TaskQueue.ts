/**
 * The `TaskQueue` port: durable background work (post-run reflection, compaction, maintenance).
 *
 * A task has a `kind` (which handler runs it), a JSON `payload` (redacted before it is stored), a
 * `priority` (higher first), a `notBefore` time and an optional expiry (`expiresAt`: a task not done
 * by then ends `expired`). A worker **claims** a task with a **lease** and keeps it with
 * **heartbeats**; a worker that dies stops heartbeating, its lease runs out, and the task is claimed
 * again (the lost attempt counts). A failed attempt is retried after an exponential backoff until
 * `maxAttempts`; a permanent failure (an error with `retryable: false`, or an invalid-argument kind of
 * error) ends it at once. Completing, failing and releasing are compare-and-set on the lease owner,
 * so a worker that lost its lease can never complete a task another worker now holds: a task
 * completes exactly once. Every state change is written to the task's log.
 *
 * ```
 * queued ──claim──► running ──complete──► succeeded
 *   ▲                 │ fail (retryable, attempts left) → queued (notBefore = now + backoff)
 *   │                 │ fail (permanent / no attempts left) → failed
 *   └── lease expired ┘ cancel → cancelled      past expiresAt → expired
 * ```
 *
 * `makeMemory` / `layerMemory` are a real in-process queue (tests, the Promise API); the SQLite
 * queue of `@palyra/journal` (`SqliteTaskQueue`) is the durable one, shared by processes that open
 * the same file. `worker` runs handlers against either, with bounded concurrency per kind.
 *
 * @since 0.1.0
 */
import { hostname } from "node:os"
import { Cause, Clock, Context, Duration, Effect, Either, Layer, Option, Schedule, Schema, type Scope } from "effect"
import { canonicalJson } from "../domain/Canonical.js"
import { Conflict, InvalidArgument, type JournalError, NotFound, PayloadTooLarge } from "../domain/Errors.js"
import { ulid } from "../domain/Ids.js"
import { defaultRedactor, type Redactor } from "../domain/Redaction.js"

// =============================================================================================
// Models
// =============================================================================================

/** @since 0.1.0 @category Models */
export const TaskState = Schema.Literal("queued", "running", "succeeded", "failed", "cancelled", "expired")
/** @since 0.1.0 @category Models */
export type TaskState = typeof TaskState.Type

/** States a task never leaves. @since 0.1.0 @category Models */
export const terminalStates: ReadonlyArray<TaskState> = ["succeeded", "failed", "cancelled", "expired"]

/** True when a task in this state will never run again. @since 0.1.0 @category Predicates */
export const isTerminal = (state: TaskState): boolean => terminalStates.includes(state)

/** A background task as stored. Times are epoch milliseconds. @since 0.1.0 @category Models */
export interface Task {
  readonly id: string
  readonly kind: string
  /** The JSON payload, as stored (redacted). */
  readonly payload: unknown
  /** Higher runs first. */
  readonly priority: number
  readonly state: TaskState
  /** Not claimed before this time (also the time a retry waits for). */
  readonly notBefore: number
  /** Ends `expired` if not done by then. */
  readonly expiresAt: number | null
  /** Attempts started so far (a claim starts one). */
  readonly attempts: number
  readonly maxAttempts: number
  /** Backoff after the n-th failed attempt: `min(backoffMaxMs, backoffBaseMs · 2^(n-1))`. */
  readonly backoffBaseMs: number
  readonly backoffMaxMs: number
  /** Who holds the lease while `running`. */
  readonly leaseOwner: string | null
  readonly leaseExpiresAt: number | null
  readonly heartbeatAt: number | null
  /** At most one task per key, ever (enqueueing the key again returns the existing task). */
  readonly dedupeKey: string | null
  readonly lastError: string | null
  readonly createdAt: number
  readonly updatedAt: number
  readonly finishedAt: number | null
}

/** What the task log records. @since 0.1.0 @category Models */
export type TaskLogEvent =
  | "enqueued"
  | "claimed"
  | "lease_lost"
  | "retry_scheduled"
  | "succeeded"
  | "failed"
  | "cancelled"
  | "expired"
  | "released"
  | "requeued"

/** One state change of a task. @since 0.1.0 @category Models */
export interface TaskLogEntry {
  readonly taskId: string
  readonly at: number
  readonly event: TaskLogEvent
  /** The attempt the change belongs to (0 before the first claim). */
  readonly attempt: number
  /** The worker (for claims, completions, failures) or the actor (cancel, requeue). */
  readonly owner: string | null
  readonly detail: string | null
}

/** @since 0.1.0 @category Models */
export interface EnqueueInput {
  /** Which handler runs it: letters, digits, `.`, `_`, `-` (1–64 characters). */
  readonly kind: string
  /** Any JSON value (default `null`); redacted before it is stored. */
  readonly payload?: unknown
  /** Higher runs first (integer in -1000..1000, default 0). */
  readonly priority?: number | undefined
  /** Do not run before this time (epoch ms)… */
  readonly notBefore?: number | undefined
  /** …or before this delay from now. */
  readonly delay?: Duration.DurationInput | undefined
  /** Expire if not done by this time (epoch ms)… */
  readonly expiresAt?: number | undefined
  /** …or within this time from now. */
  readonly ttl?: Duration.DurationInput | undefined
  /** Attempts before the task fails for good (1–100, default 5). */
  readonly maxAttempts?: number | undefined
  /** First retry delay (default 1 second), doubled after each failed attempt… */
  readonly backoffBase?: Duration.DurationInput | undefined
  /** …up to this (default 5 minutes). */
  readonly backoffMax?: Duration.DurationInput | undefined
  /** Enqueue at most once per key (up to 200 characters). */
  readonly dedupeKey?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface TaskFilter {
  readonly kind?: string | undefined
  readonly states?: ReadonlyArray<TaskState> | undefined
  readonly limit?: number | undefined
}

/** How an attempt failed. @since 0.1.0 @category Models */
export interface Failure {
  readonly message: string
  /** `false`: do not retry. */
  readonly retryable: boolean
}

/** @since 0.1.0 @category Models */
export type QueueError = JournalError | NotFound | Conflict

/** @since 0.1.0 @category Models */
export interface Service {
  /** Add a task (or return the existing one with the same `dedupeKey`). */
  readonly enqueue: (input: EnqueueInput) => Effect.Effect<Task, InvalidArgument | PayloadTooLarge | JournalError>
  /**
   * Claim the next due task of `kind` for `owner`: the highest priority, then the earliest
   * `notBefore`; a `running` task whose lease expired counts as due (its lost attempt is logged and
   * counted). Tasks past their expiry are expired on the way. `None` when nothing is due.
   */
  readonly claim: (input: {
    readonly kind: string
    readonly owner: string
    readonly lease: Duration.DurationInput
  }) => Effect.Effect<Option.Option<Task>, JournalError>
  /** Extend the lease; `Conflict` when `owner` no longer holds it (expired and reclaimed, or cancelled). */
  readonly heartbeat: (id: string, owner: string, lease: Duration.DurationInput) => Effect.Effect<Task, QueueError>
  /** Finish the task (compare-and-set on the lease owner). */
  readonly complete: (id: string, owner: string) => Effect.Effect<Task, QueueError>
  /** Fail the attempt: retried after the backoff, or failed for good (compare-and-set on the owner). */
  readonly fail: (id: string, owner: string, failure: Failure) => Effect.Effect<Task, QueueError>
  /** Give the task back unfinished (a worker shutting down): queued again, the attempt not counted. */
  readonly release: (id: string, owner: string) => Effect.Effect<Task, QueueError>
  /** Cancel a task that has not ended. A running handler loses its lease at its next heartbeat. */
  readonly cancel: (id: string, by: string) => Effect.Effect<Task, QueueError>
  readonly get: (id: string) => Effect.Effect<Option.Option<Task>, JournalError>
  /** Tasks, newest first. */
  readonly list: (filter?: TaskFilter) => Effect.Effect<ReadonlyArray<Task>, JournalError>
  /** A task's state changes, oldest first. */
  readonly log: (id: string) => Effect.Effect<ReadonlyArray<TaskLogEntry>, JournalError>
  /** Running tasks whose lease has expired (their worker stopped heartbeating). */
  readonly expiredLeases: Effect.Effect<ReadonlyArray<Task>, JournalError>
  /**
   * Requeue running tasks whose lease expired (or fail them when no attempt is left) and expire
   * tasks past their expiry, logging `by` as the actor. Returns the tasks it changed.
   */
  readonly sweep: (by: string) => Effect.Effect<ReadonlyArray<Task>, JournalError>
}

/** @since 0.1.0 @category Tags */
export class TaskQueue extends Context.Tag("@palyra/core/TaskQueue")<TaskQueue, Service>() {}

// =============================================================================================
// Shared rules (both adapters use them)
// =============================================================================================

/** Options shared by the queue adapters. @since 0.1.0 @category Models */
export interface QueueOptions {
  /** Redacts payloads and error texts before they are stored (default: the default rules). */
  readonly redactor?: Redactor | undefined
  /** Largest encoded payload, in bytes (default 64 KiB). */
  readonly maxPayloadBytes?: number | undefined
}

const KIND = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

const int = (field: string, value: number | undefined, fallback: number, min: number, max: number) =>
  value === undefined
    ? Effect.succeed(fallback)
    : Number.isInteger(value) && value >= min && value <= max
      ? Effect.succeed(value)
      : Effect.fail(new InvalidArgument({ message: `${field} must be an integer in ${min}..${max}`, field }))

/** A duration in whole milliseconds. @since 0.1.0 @category Utils */
export const millis = (d: Duration.DurationInput): number =>
  Math.max(0, Math.round(Duration.toMillis(Duration.decode(d))))

/**
 * Check an enqueue request and build the task it stores (`queued`, payload redacted and checked for
 * size). Both adapters call it, so they accept and refuse the same input.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const prepare = (
  input: EnqueueInput,
  options: QueueOptions = {}
): Effect.Effect<{ readonly task: Task; readonly payloadJson: string }, InvalidArgument | PayloadTooLarge> =>
  Effect.gen(function* () {
    const redactor = options.redactor ?? defaultRedactor
    if (typeof input.kind !== "string" || !KIND.test(input.kind)) {
      return yield* new InvalidArgument({
        message: "kind must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        field: "kind"
      })
    }
    const priority = yield* int("priority", input.priority, 0, -1000, 1000)
    const maxAttempts = yield* int("maxAttempts", input.maxAttempts, 5, 1, 100)
    if (input.dedupeKey !== undefined) {
      if (input.dedupeKey.length === 0 || input.dedupeKey.length > 200) {
        return yield* new InvalidArgument({ message: "dedupeKey must be 1–200 characters", field: "dedupeKey" })
      }
      if (redactor.redactString(input.dedupeKey) !== input.dedupeKey) {
        return yield* new InvalidArgument({ message: "dedupeKey looks like it holds a secret", field: "dedupeKey" })
      }
    }
    const now = yield* Clock.currentTimeMillis
    const notBefore = input.notBefore ?? now + (input.delay === undefined ? 0 : millis(input.delay))
    const expiresAt = input.expiresAt ?? (input.ttl === undefined ? null : now + millis(input.ttl))
    if (!Number.isFinite(notBefore) || (expiresAt !== null && !Number.isFinite(expiresAt))) {
      return yield* new InvalidArgument({ message: "notBefore and expiresAt must be finite times", field: "notBefore" })
    }
    const backoffBaseMs = millis(input.backoffBase ?? "1 second")
    const backoffMaxMs = Math.max(backoffBaseMs, millis(input.backoffMax ?? "5 minutes"))
    let payloadJson: string
    try {
      payloadJson = canonicalJson(redactor.redact(input.payload ?? null))
    } catch {
      return yield* new InvalidArgument({ message: "payload must be JSON", field: "payload" })
    }
    const limit = options.maxPayloadBytes ?? 64 * 1024
    const size = Buffer.byteLength(payloadJson)
    if (size > limit) return yield* new PayloadTooLarge({ what: "task payload", size, limit })
    const task: Task = {
      id: yield* ulid,
      kind: input.kind,
      payload: JSON.parse(payloadJson) as unknown,
      priority,
      state: "queued",
      notBefore,
      expiresAt,
      attempts: 0,
      maxAttempts,
      backoffBaseMs,
      backoffMaxMs,
      leaseOwner: null,
      leaseExpiresAt: null,
      heartbeatAt: null,
      dedupeKey: input.dedupeKey ?? null,
      lastError: null,
      createdAt: now,
      updatedAt: now,
      finishedAt: null
    }
    return { task, payloadJson }
  })

/** The wait before retrying after the task's `attempts`-th failed attempt. @since 0.1.0 @category Utils */
export const backoffMs = (task: Pick<Task, "attempts" | "backoffBaseMs" | "backoffMaxMs">): number =>
  Math.min(task.backoffMaxMs, task.backoffBaseMs * 2 ** Math.max(0, task.attempts - 1))

/** Cut and redact an error text before it is stored. @since 0.1.0 @category Utils */
export const errorText = (message: string, redactor: Redactor = defaultRedactor): string =>
  redactor.redactString(message.length > 2_000 ? `${message.slice(0, 2_000)}…` : message)

// =============================================================================================
// Transitions (pure: both adapters apply them, so they behave alike)
// =============================================================================================

/** A task's new version and the log entries that record the change. @since 0.1.0 @category Transitions */
export interface Change {
  readonly task: Task
  readonly log: ReadonlyArray<TaskLogEntry>
}

const entry = (
  task: Task,
  event: TaskLogEvent,
  owner: string | null,
  detail: string | null = null,
  attempt = task.attempts
): TaskLogEntry => ({ taskId: task.id, at: task.updatedAt, event, attempt, owner, detail })

const released = (task: Task, at: number) =>
  ({ ...task, leaseOwner: null, leaseExpiresAt: null, updatedAt: at }) satisfies Task

/** The first change of a new task. @since 0.1.0 @category Transitions */
export const enqueued = (task: Task): Change => ({ task, log: [entry(task, "enqueued", null)] })

/**
 * What time has done to a task by `at`: expired it (past `expiresAt`), or — a running task whose
 * lease ran out — logged the lost lease and queued it again (failed when no attempt is left).
 * `undefined` when nothing changed.
 *
 * @since 0.1.0
 * @category Transitions
 */
export const settle = (task: Task, at: number, by: string | null): Change | undefined => {
  if (isTerminal(task.state)) return undefined
  if (task.expiresAt !== null && task.expiresAt <= at) {
    const next: Task = { ...released(task, at), state: "expired", finishedAt: at }
    return { task: next, log: [entry(next, "expired", by, task.state === "running" ? "expired while running" : null)] }
  }
  if (task.state === "running" && (task.leaseExpiresAt ?? 0) <= at) {
    const out = task.attempts >= task.maxAttempts
    const next: Task = {
      ...released(task, at),
      state: out ? "failed" : "queued",
      lastError: "lease expired",
      finishedAt: out ? at : null
    }
    return {
      task: next,
      log: [
        entry(next, "lease_lost", task.leaseOwner, "the lease expired without a heartbeat"),
        entry(next, out ? "failed" : "requeued", by, out ? "no attempts left after the lease expired" : null)
      ]
    }
  }
  return undefined
}

/** Whether a queued task may be claimed at `at`. @since 0.1.0 @category Transitions */
export const isDue = (task: Task, at: number): boolean => task.state === "queued" && task.notBefore <= at

/** Claim order: higher priority, then earlier `notBefore`, then older id. @since 0.1.0 @category Transitions */
export const claimOrder = (a: Task, b: Task): number =>
  b.priority - a.priority || a.notBefore - b.notBefore || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** A due task claimed by `owner`. @since 0.1.0 @category Transitions */
export const claimed = (task: Task, owner: string, at: number, leaseMs: number): Change => {
  const next: Task = {
    ...task,
    state: "running",
    attempts: task.attempts + 1,
    leaseOwner: owner,
    leaseExpiresAt: at + leaseMs,
    heartbeatAt: at,
    updatedAt: at
  }
  return { task: next, log: [entry(next, "claimed", owner)] }
}

/** Whether `owner` holds the task's lease at `at`. @since 0.1.0 @category Transitions */
export const holds = (task: Task, owner: string, at: number): boolean =>
  task.state === "running" && task.leaseOwner === owner && (task.leaseExpiresAt ?? 0) > at

const notHeld = (task: Task, owner: string) =>
  Either.left(new Conflict({ message: `task ${task.id} is ${task.state}, not leased to ${owner}` }))

/** The lease extended (no log entry: a heartbeat is not a state change). @since 0.1.0 @category Transitions */
export const beat = (task: Task, owner: string, at: number, leaseMs: number): Either.Either<Task, Conflict> =>
  holds(task, owner, at)
    ? Either.right({ ...task, leaseExpiresAt: at + leaseMs, heartbeatAt: at, updatedAt: at })
    : notHeld(task, owner)

/** @since 0.1.0 @category Transitions */
export const completed = (task: Task, owner: string, at: number): Either.Either<Change, Conflict> => {
  if (!holds(task, owner, at)) return notHeld(task, owner)
  const next: Task = { ...released(task, at), state: "succeeded", finishedAt: at }
  return Either.right({ task: next, log: [entry(next, "succeeded", owner)] })
}

/** A failed attempt: retried after the backoff, or failed for good. @since 0.1.0 @category Transitions */
export const failed = (
  task: Task,
  owner: string,
  at: number,
  failure: Failure,
  redactor: Redactor = defaultRedactor
): Either.Either<Change, Conflict> => {
  if (!holds(task, owner, at)) return notHeld(task, owner)
  const message = errorText(failure.message, redactor)
  const final = !failure.retryable || task.attempts >= task.maxAttempts
  const next: Task = final
    ? { ...released(task, at), state: "failed", lastError: message, finishedAt: at }
    : { ...released(task, at), state: "queued", lastError: message, notBefore: at + backoffMs(task) }
  return Either.right({ task: next, log: [entry(next, final ? "failed" : "retry_scheduled", owner, message)] })
}

/** Given back unfinished: queued again, the attempt not counted. @since 0.1.0 @category Transitions */
export const releasedBy = (task: Task, owner: string, at: number): Either.Either<Change, Conflict> => {
  if (!holds(task, owner, at)) return notHeld(task, owner)
  const next: Task = { ...released(task, at), state: "queued", attempts: Math.max(0, task.attempts - 1), notBefore: at }
  return Either.right({ task: next, log: [entry(next, "released", owner, null, task.attempts)] })
}

/** @since 0.1.0 @category Transitions */
export const cancelled = (task: Task, by: string, at: number): Either.Either<Change, Conflict> => {
  if (isTerminal(task.state)) return Either.left(new Conflict({ message: `task ${task.id} is already ${task.state}` }))
  const next: Task = { ...released(task, at), state: "cancelled", finishedAt: at }
  return Either.right({ task: next, log: [entry(next, "cancelled", by)] })
}

// =============================================================================================
// In-memory adapter
// =============================================================================================

/**
 * A real, non-durable queue in process memory: the same transitions as the SQLite queue (every
 * operation is one synchronous step, so it is atomic), lost when the process ends.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeMemory = (options: QueueOptions = {}): Effect.Effect<Service> =>
  Effect.sync(() => {
    const redactor = options.redactor ?? defaultRedactor
    const tasks = new Map<string, Task>()
    const byKey = new Map<string, string>()
    const logs = new Map<string, Array<TaskLogEntry>>()
    const apply = (change: Change) => {
      tasks.set(change.task.id, change.task)
      const log = logs.get(change.task.id)
      if (log === undefined) logs.set(change.task.id, [...change.log])
      else log.push(...change.log)
      return change.task
    }
    const now = Clock.currentTimeMillis
    const step = (id: string, f: (task: Task, at: number) => Either.Either<Change, Conflict>) =>
      Effect.flatMap(now, (at): Effect.Effect<Task, QueueError> => {
        const task = tasks.get(id)
        if (task === undefined) return Effect.fail(new NotFound({ entity: "task", id }))
        return Either.match(f(task, at), { onLeft: Effect.fail, onRight: (c) => Effect.succeed(apply(c)) })
      })

    const service: Service = {
      enqueue: (input) =>
        Effect.flatMap(prepare(input, options), ({ task }) =>
          Effect.sync(() => {
            if (task.dedupeKey !== null) {
              const existing = byKey.get(task.dedupeKey)
              if (existing !== undefined) return tasks.get(existing)!
              byKey.set(task.dedupeKey, task.id)
            }
            return apply(enqueued(task))
          })
        ),
      claim: ({ kind, owner, lease }) =>
        Effect.map(now, (at) => {
          let best: Task | undefined
          for (const t of [...tasks.values()]) {
            if (t.kind !== kind) continue
            const settled = settle(t, at, owner)
            const current = settled === undefined ? t : apply(settled)
            if (isDue(current, at) && (best === undefined || claimOrder(current, best) < 0)) best = current
          }
          return best === undefined ? Option.none() : Option.some(apply(claimed(best, owner, at, millis(lease))))
        }),
      heartbeat: (id, owner, lease) =>
        Effect.flatMap(now, (at): Effect.Effect<Task, QueueError> => {
          const task = tasks.get(id)
          if (task === undefined) return Effect.fail(new NotFound({ entity: "task", id }))
          return Either.match(beat(task, owner, at, millis(lease)), {
            onLeft: Effect.fail,
            onRight: (next) =>
              Effect.sync(() => {
                tasks.set(id, next)
                return next
              })
          })
        }),
      complete: (id, owner) => step(id, (task, at) => completed(task, owner, at)),
      fail: (id, owner, failure) => step(id, (task, at) => failed(task, owner, at, failure, redactor)),
      release: (id, owner) => step(id, (task, at) => releasedBy(task, owner, at)),
      cancel: (id, by) => step(id, (task, at) => cancelled(task, by, at)),
      get: (id) => Effect.sync(() => Option.fromNullable(tasks.get(id))),
      list: (filter = {}) =>
        Effect.sync(() => {
          const out = [...tasks.values()]
            .filter(
              (t) =>
                (filter.kind === undefined || t.kind === filter.kind) &&
                (filter.states === undefined || filter.states.includes(t.state))
            )
            .sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0))
          return filter.limit === undefined ? out : out.slice(0, Math.max(0, filter.limit))
        }),
      log: (id) => Effect.sync(() => [...(logs.get(id) ?? [])]),
      expiredLeases: Effect.map(now, (at) =>
        [...tasks.values()].filter((t) => t.state === "running" && (t.leaseExpiresAt ?? 0) <= at)
      ),
      sweep: (by) =>
        Effect.map(now, (at) => {
          const changed: Array<Task> = []
          for (const t of [...tasks.values()]) {
            const settled = settle(t, at, by)
            if (settled !== undefined) changed.push(apply(settled))
          }
          return changed
        })
    }
    return service
  })

/** The in-memory queue as a layer. @since 0.1.0 @category Layers */
export const layerMemory = (options: QueueOptions = {}): Layer.Layer<TaskQueue> =>
  Layer.effect(TaskQueue, makeMemory(options))

// =============================================================================================
// Worker
// =============================================================================================

/** What a handler gets besides the task. @since 0.1.0 @category Models */
export interface HandlerContext {
  /** The worker that holds the lease. */
  readonly owner: string
  /** Extend the lease now (the worker also heartbeats on its own schedule). */
  readonly heartbeat: Effect.Effect<void, QueueError>
}

/**
 * Runs one task. Fail with an error carrying `retryable: false` (e.g. a `ProviderError` that says
 * so), or an `InvalidArgument`, `NotFound`, `PermissionDenied`, `PolicyDenied` or
 * `PayloadTooLarge`, to end the task at once; any other failure or defect is retried.
 *
 * @since 0.1.0
 * @category Models
 */
export type Handler = (task: Task, context: HandlerContext) => Effect.Effect<unknown, unknown>

/** @since 0.1.0 @category Models */
export interface WorkerOptions {
  /** Handlers by task kind: the worker claims only these kinds. */
  readonly handlers: Readonly<Record<string, Handler>>
  /** Tasks of one kind run at once in this worker (default 1; a number for every kind, or per kind). */
  readonly concurrency?: number | Readonly<Record<string, number>> | undefined
  /** Lease per claim (default 30 seconds). */
  readonly lease?: Duration.DurationInput | undefined
  /** Heartbeat interval (default a third of the lease). */
  readonly heartbeatEvery?: Duration.DurationInput | undefined
  /** Wait between two polls when nothing is due (default 1 second). */
  readonly pollInterval?: Duration.DurationInput | undefined
  /** The lease owner's name (default host:pid:random). */
  readonly owner?: string | undefined
}

const PERMANENT = new Set(["InvalidArgument", "NotFound", "PermissionDenied", "PolicyDenied", "PayloadTooLarge"])

/** Whether a handler's failure should end its task without another attempt. @since 0.1.0 @category Predicates */
export const isPermanent = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null) return false
  const e = error as { readonly retryable?: unknown; readonly _tag?: unknown }
  return e.retryable === false || (typeof e._tag === "string" && PERMANENT.has(e._tag))
}

class LeaseLost {
  readonly _tag = "LeaseLost"
  constructor(readonly cause: QueueError) {}
}

const describe = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const e = failure.value
    return e instanceof Error ? e.message : typeof e === "string" ? e : (JSON.stringify(e) ?? String(e))
  }
  return Cause.pretty(cause).split("\n")[0] ?? "defect"
}

/**
 * Run handlers until the scope closes: per kind, `concurrency` loops that claim a due task, run its
 * handler while heartbeating, and complete or fail it. A handler whose lease is lost (cancelled, or
 * expired and claimed elsewhere) is interrupted and its result dropped. When the scope closes,
 * running handlers are interrupted and their tasks released (queued again, the attempt not counted).
 *
 * @since 0.1.0
 * @category Workers
 */
export const worker = (options: WorkerOptions): Effect.Effect<void, never, TaskQueue | Scope.Scope> =>
  Effect.gen(function* () {
    const queue = yield* TaskQueue
    const lease = Duration.decode(options.lease ?? "30 seconds")
    const every = Duration.decode(options.heartbeatEvery ?? Duration.toMillis(lease) / 3)
    const poll = Duration.decode(options.pollInterval ?? "1 second")
    const owner = options.owner ?? `${hostname()}:${process.pid}:${(yield* ulid).slice(-8)}`
    const concurrencyOf = (kind: string) => {
      const c = options.concurrency
      const n = c === undefined ? 1 : typeof c === "number" ? c : (c[kind] ?? 1)
      return Math.max(1, Math.floor(n))
    }

    const runTask = (task: Task, handler: Handler) =>
      Effect.gen(function* () {
        const beat = queue.heartbeat(task.id, owner, lease)
        // Only a lost lease (Conflict, NotFound) stops the handler; a storage hiccup is retried at the next beat.
        const keepLease = beat.pipe(
          Effect.catchTag("JournalError", (e) => Effect.logWarning("task heartbeat failed: retrying", e)),
          Effect.repeat(Schedule.spaced(every)),
          Effect.mapError((e) => new LeaseLost(e)),
          Effect.zipRight(Effect.never)
        )
        const outcome = yield* handler(task, { owner, heartbeat: Effect.asVoid(beat) }).pipe(
          Effect.sandbox,
          Effect.either,
          Effect.raceFirst(Effect.either(keepLease)),
          Effect.onInterrupt(() =>
            queue.release(task.id, owner).pipe(
              Effect.catchAll(() => Effect.void),
              Effect.asVoid
            )
          )
        )
        if (outcome._tag === "Right") {
          yield* queue
            .complete(task.id, owner)
            .pipe(
              Effect.catchAll((e) =>
                Effect.logWarning("task finished after its lease was lost: result dropped", { task: task.id, e })
              )
            )
          return
        }
        const left = outcome.left
        if (left instanceof LeaseLost) {
          yield* Effect.logWarning("task lease lost: handler stopped", { task: task.id, reason: left.cause.message })
          return
        }
        const failure = Cause.failureOption(left)
        const retryable = !(Option.isSome(failure) && isPermanent(failure.value))
        yield* queue
          .fail(task.id, owner, { message: describe(left), retryable })
          .pipe(Effect.catchAll((e) => Effect.logWarning("could not record a task failure", { task: task.id, e })))
      }).pipe(Effect.withSpan("TaskQueue.run", { attributes: { kind: task.kind, task: task.id } }))

    const loop = (kind: string, handler: Handler) =>
      queue.claim({ kind, owner, lease }).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () => Effect.sleep(poll),
            onSome: (task) => runTask(task, handler)
          })
        ),
        Effect.catchAll((e) => Effect.zipRight(Effect.logError("task claim failed", e), Effect.sleep(poll))),
        Effect.forever
      )

    for (const [kind, handler] of Object.entries(options.handlers)) {
      for (let i = 0; i < concurrencyOf(kind); i++) yield* Effect.forkScoped(loop(kind, handler))
    }
  })

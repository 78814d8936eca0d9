/**
 * The durable background queue: core's `TaskQueue` port on the journal's SQLite file (tables
 * `tasks` and `task_log`, migration `0006_tasks_memory`).
 *
 * It opens its own connection to the file, so several processes can share one queue: every change
 * is one `BEGIN IMMEDIATE` transaction that reads the task, applies core's transition
 * (`TaskQueue.claimed`, `completed`, `failed`, …: the same rules as the in-memory queue) and writes
 * the task with its log entries. Completing, failing and releasing compare the lease owner inside
 * that transaction, so a worker whose lease expired (it was SIGKILLed, or stalled) can never
 * complete a task another worker claimed since: each task completes exactly once.
 *
 * Payloads and error texts are redacted before they are written; task rows are not part of the
 * journal's hash chains (they are work items, not security records), but every state change is in
 * `task_log`.
 *
 * @since 0.1.0
 */
import { Errors, Redaction } from "@palyra/core"
import { TaskQueue } from "@palyra/core/memory"
import { Clock, type Duration, Effect, Either, Layer, Option, type Scope } from "effect"
import { type OpenOptions, openDatabase, retryBusy, storageError } from "./internal/database.js"

/** @since 0.1.0 @category Models */
export interface Options extends OpenOptions {
  /** Redaction rules for payloads and errors, added to the defaults. `false` turns redaction off. */
  readonly redaction?: Redaction.RedactionOptions | false | undefined
  /** Largest encoded payload, in bytes (default 64 KiB). */
  readonly maxPayloadBytes?: number | undefined
}

type Row = Record<string, unknown>

const toTask = (r: Row): TaskQueue.Task => ({
  id: r.id as string,
  kind: r.kind as string,
  payload: JSON.parse(r.payload as string) as unknown,
  priority: r.priority as number,
  state: r.state as TaskQueue.TaskState,
  notBefore: r.not_before as number,
  expiresAt: (r.expires_at as number | null) ?? null,
  attempts: r.attempts as number,
  maxAttempts: r.max_attempts as number,
  backoffBaseMs: r.backoff_base_ms as number,
  backoffMaxMs: r.backoff_max_ms as number,
  leaseOwner: (r.lease_owner as string | null) ?? null,
  leaseExpiresAt: (r.lease_expires_at as number | null) ?? null,
  heartbeatAt: (r.heartbeat_at as number | null) ?? null,
  dedupeKey: (r.dedupe_key as string | null) ?? null,
  lastError: (r.last_error as string | null) ?? null,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
  finishedAt: (r.finished_at as number | null) ?? null
})

const toEntry = (r: Row): TaskQueue.TaskLogEntry => ({
  taskId: r.task_id as string,
  at: r.at as number,
  event: r.event as TaskQueue.TaskLogEvent,
  attempt: r.attempt as number,
  owner: (r.owner as string | null) ?? null,
  detail: (r.detail as string | null) ?? null
})

/**
 * Open the queue on the journal's file (migrating it if needed); closed when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<TaskQueue.Service, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const db = yield* openDatabase(options, "SqliteTaskQueue.open")
    const redactor = options.redaction === false ? Redaction.none : Redaction.make(options.redaction || {})
    const queueOptions: TaskQueue.QueueOptions = { redactor, maxPayloadBytes: options.maxPayloadBytes }

    const st = {
      get: db.prepare("SELECT * FROM tasks WHERE id = ?"),
      byKey: db.prepare("SELECT * FROM tasks WHERE dedupe_key = ?"),
      insert: db.prepare(
        `INSERT INTO tasks (id, kind, payload, priority, state, not_before, expires_at, attempts, max_attempts,
          backoff_base_ms, backoff_max_ms, lease_owner, lease_expires_at, heartbeat_at, dedupe_key, last_error,
          created_at, updated_at, finished_at)
         VALUES (@id, @kind, @payload, @priority, @state, @notBefore, @expiresAt, @attempts, @maxAttempts,
          @backoffBaseMs, @backoffMaxMs, @leaseOwner, @leaseExpiresAt, @heartbeatAt, @dedupeKey, @lastError,
          @createdAt, @updatedAt, @finishedAt)`
      ),
      update: db.prepare(
        `UPDATE tasks SET state = @state, not_before = @notBefore, attempts = @attempts, lease_owner = @leaseOwner,
          lease_expires_at = @leaseExpiresAt, heartbeat_at = @heartbeatAt, last_error = @lastError,
          updated_at = @updatedAt, finished_at = @finishedAt
         WHERE id = @id`
      ),
      log: db.prepare(
        "INSERT INTO task_log (task_id, at, event, attempt, owner, detail) VALUES (@taskId, @at, @event, @attempt, @owner, @detail)"
      ),
      logOf: db.prepare("SELECT * FROM task_log WHERE task_id = ? ORDER BY seq"),
      // What time has overtaken: past expiry, or running with an expired lease.
      overdueOf: db.prepare(
        `SELECT * FROM tasks WHERE kind = @kind AND (
           (state IN ('queued', 'running') AND expires_at IS NOT NULL AND expires_at <= @now)
           OR (state = 'running' AND lease_expires_at <= @now))`
      ),
      overdue: db.prepare(
        `SELECT * FROM tasks WHERE (state IN ('queued', 'running') AND expires_at IS NOT NULL AND expires_at <= @now)
           OR (state = 'running' AND lease_expires_at <= @now)`
      ),
      next: db.prepare(
        `SELECT * FROM tasks WHERE kind = ? AND state = 'queued' AND not_before <= ?
         ORDER BY priority DESC, not_before, id LIMIT 1`
      ),
      expiredLeases: db.prepare("SELECT * FROM tasks WHERE state = 'running' AND lease_expires_at <= ? ORDER BY id")
    }

    // The payload never changes after enqueue: it is written once, as prepared.
    const write = (change: TaskQueue.Change) => {
      const { payload: _payload, ...fields } = change.task
      st.update.run(fields)
      for (const e of change.log) st.log.run(e)
      return change.task
    }
    const read = (id: string) => {
      const row = st.get.get(id) as Row | undefined
      return row === undefined ? undefined : toTask(row)
    }
    const sync = <A>(method: string, f: () => A) => Effect.try({ try: f, catch: storageError(method) })
    // Writes wait for the journal's writer asynchronously (see `retryBusy`), never in SQLite's busy handler.
    const busy = retryBusy(options.busyTimeoutMs)
    const immediate = <A>(method: string, f: () => A) =>
      busy(Effect.try({ try: () => db.transaction(f).immediate(), catch: storageError(method) }))

    /** One compare-and-set step: read, apply the transition, write — in one immediate transaction. */
    const step = (
      method: string,
      id: string,
      f: (task: TaskQueue.Task, at: number) => Either.Either<TaskQueue.Change, Errors.Conflict>
    ): Effect.Effect<TaskQueue.Task, TaskQueue.QueueError> =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        Effect.flatten(
          immediate(method, (): Effect.Effect<TaskQueue.Task, Errors.NotFound | Errors.Conflict> => {
            const task = read(id)
            if (task === undefined) return Effect.fail(new Errors.NotFound({ entity: "task", id }))
            return Either.match(f(task, at), {
              onLeft: Effect.fail,
              onRight: (change) => Effect.succeed(write(change))
            })
          })
        )
      )

    /** Settle what time has overtaken, then claim the next task of `kind`: one immediate transaction. */
    const claimNow = (kind: string, owner: string, lease: Duration.DurationInput, at: number) =>
      immediate("claim", () => {
        settleAll(st.overdueOf.all({ kind, now: at }) as Array<Row>, at, owner)
        const row = st.next.get(kind, at) as Row | undefined
        if (row === undefined) return Option.none<TaskQueue.Task>()
        return Option.some(write(TaskQueue.claimed(toTask(row), owner, at, TaskQueue.millis(lease))))
      })

    const settleAll = (rows: ReadonlyArray<Row>, at: number, by: string | null) => {
      const changed: Array<TaskQueue.Task> = []
      for (const row of rows) {
        const change = TaskQueue.settle(toTask(row), at, by)
        if (change !== undefined) changed.push(write(change))
      }
      return changed
    }

    const service: TaskQueue.Service = {
      enqueue: (input) =>
        Effect.flatMap(TaskQueue.prepare(input, queueOptions), ({ task, payloadJson }) =>
          immediate("enqueue", () => {
            if (task.dedupeKey !== null) {
              const existing = st.byKey.get(task.dedupeKey) as Row | undefined
              if (existing !== undefined) return toTask(existing)
            }
            st.insert.run({ ...task, payload: payloadJson })
            for (const e of TaskQueue.enqueued(task).log) st.log.run(e)
            return task
          })
        ),
      claim: ({ kind, owner, lease }) =>
        Effect.flatMap(Clock.currentTimeMillis, (at) =>
          // A worker polls: when a plain read finds nothing to claim or settle (the usual answer),
          // no write transaction is opened (it would wait for, and hold up, the journal's writer).
          // Anything found is read again under the write lock below.
          Effect.flatMap(
            sync(
              "claim",
              () => st.next.get(kind, at) === undefined && st.overdueOf.get({ kind, now: at }) === undefined
            ),
            (idle) => (idle ? Effect.succeed(Option.none()) : claimNow(kind, owner, lease, at))
          )
        ),
      heartbeat: (id, owner, lease) =>
        step("heartbeat", id, (task, at) =>
          Either.map(TaskQueue.beat(task, owner, at, TaskQueue.millis(lease)), (next) => ({ task: next, log: [] }))
        ),
      complete: (id, owner) => step("complete", id, (task, at) => TaskQueue.completed(task, owner, at)),
      fail: (id, owner, failure) =>
        step("fail", id, (task, at) => TaskQueue.failed(task, owner, at, failure, redactor)),
      release: (id, owner) => step("release", id, (task, at) => TaskQueue.releasedBy(task, owner, at)),
      cancel: (id, by) => step("cancel", id, (task, at) => TaskQueue.cancelled(task, by, at)),
      get: (id) => sync("get", () => Option.fromNullable(read(id))),
      list: (filter = {}) =>
        sync("list", () => {
          const where: Array<string> = []
          const args: Array<unknown> = []
          if (filter.kind !== undefined) {
            where.push("kind = ?")
            args.push(filter.kind)
          }
          if (filter.states !== undefined) {
            if (filter.states.length === 0) return []
            where.push(`state IN (${filter.states.map(() => "?").join(", ")})`)
            args.push(...filter.states)
          }
          args.push(filter.limit === undefined ? -1 : Math.max(0, filter.limit))
          const clause = where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""
          return (db.prepare(`SELECT * FROM tasks ${clause} ORDER BY id DESC LIMIT ?`).all(...args) as Array<Row>).map(
            toTask
          )
        }),
      log: (id) => sync("log", () => (st.logOf.all(id) as Array<Row>).map(toEntry)),
      expiredLeases: Effect.flatMap(Clock.currentTimeMillis, (at) =>
        sync("expiredLeases", () => (st.expiredLeases.all(at) as Array<Row>).map(toTask))
      ),
      sweep: (by) =>
        Effect.flatMap(Clock.currentTimeMillis, (at) =>
          immediate("sweep", () => settleAll(st.overdue.all({ now: at }) as Array<Row>, at, by))
        )
    }
    return service
  }).pipe(Effect.withSpan("SqliteTaskQueue.open", { attributes: { filename: options.filename } }))

/** The queue as core's `TaskQueue`. @since 0.1.0 @category Layers */
export const layer = (options: Options): Layer.Layer<TaskQueue.TaskQueue, Errors.JournalError> =>
  Layer.scoped(TaskQueue.TaskQueue, make(options))

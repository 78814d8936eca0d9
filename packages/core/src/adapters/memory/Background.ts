/**
 * The after-run features behind one authorized service, for transports (HTTP, gRPC, the CLI):
 * background tasks, learning candidates, watchdog incidents and memory. Authorization is here, in
 * core, never in a transport:
 *
 * - tasks and incidents are operators' (a non-operator listing them gets `PermissionDenied`;
 *   cancelling a task it cannot see answers `NotFound`);
 * - a principal sees and decides only its own learning candidates and searches and forgets only
 *   its own memory; another principal's candidate or item answers `NotFound`, exactly like one
 *   that does not exist. An operator may list every principal's candidates and decide them.
 *
 * A feature that is not switched on answers `NotFound` with entity `feature` (HTTP 404
 * `not_found`, "feature learning not found").
 *
 * @since 0.1.0
 */
import { Context, Effect, Metric, Option } from "effect"
import type * as Caller from "../../domain/Caller.js"
import { type InvalidArgument, type JournalError, NotFound, PermissionDenied } from "../../domain/Errors.js"
import type {
  Candidate,
  CandidateStatus,
  MemoryItem,
  SearchHit,
  Service as StoreService
} from "../../ports/MemoryStore.js"
import type { QueueError, Task, Service as TaskQueueService, TaskState } from "../../ports/TaskQueue.js"
import type * as Learning from "./Learning.js"
import type * as Watchdog from "./Watchdog.js"

/** Which features are on. @since 0.1.0 @category Models */
export interface Parts {
  readonly queue?: TaskQueueService | undefined
  readonly store?: StoreService | undefined
  readonly learning?: Learning.Service | undefined
  readonly watchdog?: Watchdog.Service | undefined
}

/** @since 0.1.0 @category Models */
export type BackgroundError = NotFound | PermissionDenied | InvalidArgument | JournalError | QueueError

/** @since 0.1.0 @category Models */
export interface Service {
  /** Background tasks, newest first (operators). */
  readonly listTasks: (
    caller: Caller.Caller,
    filter?: {
      readonly states?: ReadonlyArray<TaskState> | undefined
      readonly kind?: string | undefined
      readonly limit?: number | undefined
    }
  ) => Effect.Effect<ReadonlyArray<Task>, BackgroundError>
  /** Cancel a task that has not ended (operators). */
  readonly cancelTask: (caller: Caller.Caller, id: string) => Effect.Effect<Task, BackgroundError>
  /** Learning candidates the caller may see (default: pending). */
  readonly listCandidates: (
    caller: Caller.Caller,
    filter?: { readonly status?: CandidateStatus | undefined; readonly principal?: string | undefined }
  ) => Effect.Effect<ReadonlyArray<Candidate>, BackgroundError>
  /** Accept (written to memory) or reject a pending candidate the caller owns. */
  readonly decideCandidate: (
    caller: Caller.Caller,
    id: string,
    decision: "accept" | "reject",
    reason?: string
  ) => Effect.Effect<{ readonly candidate: Candidate; readonly item: MemoryItem | null }, BackgroundError>
  /** Watchdog incidents, newest first (operators). */
  readonly incidents: (
    caller: Caller.Caller,
    filter?: Watchdog.IncidentFilter
  ) => Effect.Effect<ReadonlyArray<Watchdog.Incident>, BackgroundError>
  /** Search the caller's own memory. */
  readonly searchMemory: (
    caller: Caller.Caller,
    query: { readonly text: string; readonly limit?: number | undefined }
  ) => Effect.Effect<ReadonlyArray<SearchHit>, BackgroundError>
  /** Forget one of the caller's own memory items. */
  readonly forgetMemory: (caller: Caller.Caller, id: string) => Effect.Effect<void, BackgroundError>
  /** Which features are on. */
  readonly enabled: {
    readonly tasks: boolean
    readonly memory: boolean
    readonly learning: boolean
    readonly watchdog: boolean
  }
}

/** @since 0.1.0 @category Tags */
export class Background extends Context.Tag("@palyra/core/Background")<Background, Service>() {}

/** Tasks by state (queued and running; refreshed by `AfterRun`). @since 0.1.0 @category Metrics */
export const tasksGauge = Metric.gauge("palyra_tasks", { description: "Background tasks by state (queued, running)" })

const off = (feature: string) => new NotFound({ entity: "feature", id: feature })
const need = <A>(part: A | undefined, feature: string): Effect.Effect<A, NotFound> =>
  part === undefined ? Effect.fail(off(feature)) : Effect.succeed(part)
const operatorOnly = (caller: Caller.Caller, what: string) =>
  caller.operator ? Effect.void : Effect.fail(new PermissionDenied({ message: `${what} need an operator` }))

/**
 * The authorized service over the parts that are switched on.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (parts: Parts): Service => ({
  enabled: {
    tasks: parts.queue !== undefined,
    memory: parts.store !== undefined,
    learning: parts.learning !== undefined,
    watchdog: parts.watchdog !== undefined
  },
  listTasks: (caller, filter = {}) =>
    Effect.gen(function* () {
      const queue = yield* need(parts.queue, "tasks")
      yield* operatorOnly(caller, "background tasks")
      return yield* queue.list({ states: filter.states, kind: filter.kind, limit: filter.limit ?? 100 })
    }).pipe(Effect.withSpan("Background.listTasks")),
  cancelTask: (caller, id) =>
    Effect.gen(function* () {
      const queue = yield* need(parts.queue, "tasks")
      if (!caller.operator) return yield* new NotFound({ entity: "task", id })
      return yield* queue.cancel(id, caller.principal)
    }).pipe(Effect.withSpan("Background.cancelTask", { attributes: { task: id } })),
  listCandidates: (caller, filter = {}) =>
    Effect.flatMap(need(parts.learning, "learning"), (learning) => learning.list(caller, filter)),
  decideCandidate: (caller, id, decision, reason) =>
    Effect.flatMap(need(parts.learning, "learning"), (learning) =>
      decision === "accept" ? learning.accept(caller, id) : learning.reject(caller, id, reason)
    ).pipe(Effect.withSpan("Background.decideCandidate", { attributes: { candidate: id, decision } })),
  incidents: (caller, filter) =>
    Effect.flatMap(need(parts.watchdog, "watchdog"), (watchdog) => watchdog.incidents(caller, filter)),
  searchMemory: (caller, query) =>
    Effect.flatMap(need(parts.store, "memory"), (store) =>
      store.search({ principal: caller.principal, text: query.text, limit: query.limit ?? 10 })
    ).pipe(Effect.withSpan("Background.searchMemory")),
  forgetMemory: (caller, id) =>
    Effect.flatMap(need(parts.store, "memory"), (store) =>
      Effect.flatMap(store.get(caller.principal, id), (found) =>
        Option.isSome(found)
          ? store.forget(caller.principal, id)
          : Effect.fail(new NotFound({ entity: "memory item", id }))
      )
    ).pipe(Effect.withSpan("Background.forgetMemory"))
})

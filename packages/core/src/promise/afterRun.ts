/**
 * The Promise API's after-run options (`memory`, `learning`, `watchdog`, `tasks`): `@palyra/core/memory`
 * is imported only when one of them is on, so an embedder that does not use them never loads it.
 * @internal
 */
import { Effect, Layer, Option } from "effect"
import type * as AfterRun from "../adapters/memory/AfterRun.js"
import type * as Background from "../adapters/memory/Background.js"
import type * as Watchdog from "../adapters/memory/Watchdog.js"
import type * as Caller from "../domain/Caller.js"
import { NotFound } from "../domain/Errors.js"
import * as Kernel from "../kernel/Kernel.js"
import type * as MemoryStore from "../ports/MemoryStore.js"
import type * as TaskQueue from "../ports/TaskQueue.js"

/** @internal */
export interface AfterRunOptions {
  /** Memory across sessions (injected into prompts; `memory.search` / `memory.save` tools). Default store: in memory. */
  readonly memory?: boolean | (AfterRun.MemoryOptions & { readonly store?: MemoryStore.Service }) | undefined
  /** Post-run reflection (deterministic extractor unless `extractor: "model"`); needs memory's store. */
  readonly learning?: boolean | AfterRun.LearningOptions | undefined
  /** The watchdog: a mode, or its options. */
  readonly watchdog?: Watchdog.Mode | Watchdog.Options | undefined
  /** The background queue (default: in memory) and its worker's options. */
  readonly tasks?: ({ readonly queue?: TaskQueue.Service } & Omit<TaskQueue.WorkerOptions, "handlers">) | undefined
}

const on = (o: AfterRunOptions) =>
  Boolean(o.memory) ||
  Boolean(o.learning) ||
  (o.watchdog !== undefined && o.watchdog !== "off" && (typeof o.watchdog === "string" || o.watchdog.mode !== "off"))

/** The kernel, with the after-run features that are on. @internal */
export const kernelWith = (
  o: AfterRunOptions,
  kernel: Kernel.Options<unknown, unknown, unknown>
): Layer.Layer<Kernel.Services, unknown> =>
  on(o)
    ? Layer.unwrapEffect(
        Effect.gen(function* () {
          const m = yield* Effect.promise(() => import("../memory.js"))
          const memory = typeof o.memory === "object" ? o.memory : o.memory ? {} : undefined
          const learning = typeof o.learning === "object" ? o.learning : o.learning ? {} : undefined
          const store = memory?.store ?? (memory || learning ? yield* m.MemoryStore.makeMemory() : undefined)
          const queue = o.tasks?.queue ?? (learning ? yield* m.TaskQueue.makeMemory() : undefined)
          const afterRun = m.AfterRun.make({
            store,
            queue,
            memory: memory ?? false,
            learning: learning ?? false,
            watchdog: typeof o.watchdog === "string" ? { mode: o.watchdog } : o.watchdog,
            worker: o.tasks
          })
          return afterRun.layer.pipe(Layer.provideMerge(afterRun.kernelLayer(kernel)))
        })
      )
    : Kernel.layer(kernel)

/** Run `f` with the `Background` service, or fail `NotFound` (feature) when none is on. @internal */
export const withBackground = <A>(
  feature: string,
  f: (b: Background.Service) => Effect.Effect<A, unknown>
): Effect.Effect<A, unknown> =>
  Effect.flatMap(
    Effect.promise(() => import("../adapters/memory/Background.js")),
    (m) =>
      Effect.flatMap(Effect.serviceOption(m.Background), (b) =>
        Option.isSome(b) ? f(b.value) : Effect.fail(new NotFound({ entity: "feature", id: feature }))
      )
  )

/** The Promise API's after-run methods. @internal */
export const backgroundApi = (
  run: <A>(effect: Effect.Effect<A, unknown>) => Promise<A>,
  asUser: (o?: { readonly principal?: string | undefined }) => Caller.Caller,
  asOperator: () => Caller.Caller
) => ({
  learning: {
    list: (o?: { readonly principal?: string; readonly status?: MemoryStore.CandidateStatus }) =>
      run(withBackground("learning", (b) => b.listCandidates(asUser(o), { status: o?.status }))),
    accept: (id: string, o?: { readonly principal?: string }) =>
      run(withBackground("learning", (b) => b.decideCandidate(asUser(o), id, "accept"))),
    reject: (id: string, o?: { readonly principal?: string; readonly reason?: string }) =>
      run(withBackground("learning", (b) => b.decideCandidate(asUser(o), id, "reject", o?.reason)))
  },
  memory: {
    search: (query: string, o?: { readonly principal?: string; readonly limit?: number }) =>
      run(withBackground("memory", (b) => b.searchMemory(asUser(o), { text: query, limit: o?.limit }))),
    forget: (id: string, o?: { readonly principal?: string }) =>
      run(withBackground("memory", (b) => b.forgetMemory(asUser(o), id)))
  },
  incidents: (filter?: Watchdog.IncidentFilter) =>
    run(withBackground("watchdog", (b) => b.incidents(asOperator(), filter))),
  tasks: (filter?: { readonly states?: ReadonlyArray<TaskQueue.TaskState>; readonly kind?: string }) =>
    run(withBackground("tasks", (b) => b.listTasks(asOperator(), filter)))
})

/**
 * The daemon's after-run life in one place: memory injection and the memory tools in the kernel,
 * post-run reflection on the background queue, the queue's worker, the watchdog, and the
 * authorized `Background` service the transports answer from. Each part switches on with one
 * option:
 *
 * ```ts
 * const afterRun = AfterRun.make({ store, queue, memory: { tokenBudget: 400 }, learning: {}, watchdog: { mode: "observe" } })
 * const kernel = Kernel.layer({ model, journal, ...afterRun.kernel({ tools, promptAssembler }) })
 * const app = afterRun.layer.pipe(Layer.provideMerge(kernel)) // Background, worker and watchdog running
 * ```
 *
 * - `memory` (needs `store`): the prompt assembler (the context engine, or the default) is wrapped
 *   with `Memory.injecting`, and `memory.search` / `memory.save` join the tools (under policy:
 *   `memory.save` is `sensitive`, so the default policies ask for approval).
 * - `learning` (needs `store` and `queue`): a run that ends enqueues one reflection
 *   (`Learning.afterRun`, through the kernel's `RunHooks`; none for a run the deterministic
 *   extractor finds nothing in), which the worker runs.
 * - `queue`: the worker runs the handlers (`memory.reflect`, `memory.purge`) for the layer's lifetime.
 * - `watchdog`: the watchdog loop in its mode (`off`, `observe`, `auto`), watching this process's
 *   tool process groups (`Processes.shared`) too.
 *
 * @since 0.1.0
 */
import { Clock, Deferred, type Duration, Effect, FiberId, Layer, Metric, Option, Schedule } from "effect"
import { InvalidArgument } from "../../domain/Errors.js"
import type { Run } from "../../domain/Records.js"
import type { RunState } from "../../domain/RunState.js"
import type { Risk, TapeEvent } from "../../domain/TapeEvent.js"
import * as Gateway from "../../kernel/Gateway.js"
import * as Kernel from "../../kernel/Kernel.js"
import type * as PromptAssembler from "../../kernel/PromptAssembler.js"
import * as RunHooks from "../../kernel/RunHooks.js"
import { Journal, type Service as JournalService, readRunTape } from "../../ports/Journal.js"
import type { LiveTape } from "../../ports/LiveTape.js"
import { MemoryStore, type Service as StoreService } from "../../ports/MemoryStore.js"
import { ModelProvider } from "../../ports/ModelProvider.js"
import type { PolicyEngine } from "../../ports/PolicyEngine.js"
import * as TaskQueue from "../../ports/TaskQueue.js"
import type * as Tool from "../../ports/Tool.js"
import * as Processes from "../tools/sandbox/Processes.js"
import * as Background from "./Background.js"
import * as Learning from "./Learning.js"
import * as Memory from "./Memory.js"
import * as Watchdog from "./Watchdog.js"

/** @since 0.1.0 @category Models */
export interface MemoryOptions {
  /** Inject memory into prompts (default true). */
  readonly inject?: boolean | undefined
  /** Tokens the injected block may take (default 512). */
  readonly tokenBudget?: number | undefined
  /** Items injected at most (default 5). */
  readonly maxItems?: number | undefined
  /** Add `memory.search` / `memory.save` to the tools (default true). */
  readonly tools?: boolean | undefined
  /** Risk of `memory.save` (default `sensitive`). */
  readonly saveRisk?: Risk | undefined
  /** When a run ends, save its user messages as `note` items of the principal (default false). */
  readonly autoIngest?: boolean | undefined
}

/** @since 0.1.0 @category Models */
export interface LearningOptions {
  /** `model`: the kernel's model reflects (falling back to the deterministic extractor); default `deterministic`. */
  readonly extractor?: "model" | "deterministic" | undefined
  readonly autoWriteThresholdBps?: number | undefined
  readonly minConfidenceBps?: number | undefined
  readonly maxCandidates?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** The memory store: memory is on when it is given (and `memory` is not `false`). */
  readonly store?: StoreService | undefined
  /** The background queue: its worker runs when it is given. */
  readonly queue?: TaskQueue.Service | undefined
  readonly memory?: MemoryOptions | false | undefined
  /** Post-run reflection (needs `store` and `queue`); off unless given. */
  readonly learning?: LearningOptions | false | undefined
  /** The watchdog; off unless given. */
  readonly watchdog?: Watchdog.Options | false | undefined
  /** The worker's options (default: one task of each kind at a time). */
  readonly worker?: Omit<TaskQueue.WorkerOptions, "handlers"> | undefined
  /** How often the `palyra_tasks` gauge is refreshed (default 15 seconds). */
  readonly metricsEvery?: Duration.DurationInput | undefined
}

/** What `Kernel.layer` needs from the after-run parts. @since 0.1.0 @category Models */
export interface KernelParts<EA> {
  readonly promptAssembler?:
    | Layer.Layer<PromptAssembler.PromptAssembler, EA, Journal | ModelProvider | PolicyEngine | LiveTape>
    | undefined
  readonly tools: ReadonlyArray<Tool.AnyTool>
  readonly runHooks: RunHooks.Service
}

/** @since 0.1.0 @category Models */
export interface AfterRun {
  /** Wrap the kernel's prompt assembler and tools and add the run-end hook: spread into `Kernel.layer`. */
  readonly kernel: <EA = never>(base: {
    readonly promptAssembler?:
      | Layer.Layer<PromptAssembler.PromptAssembler, EA, Journal | ModelProvider | PolicyEngine | LiveTape>
      | undefined
    readonly tools?: ReadonlyArray<Tool.AnyTool> | undefined
  }) => KernelParts<EA>
  /** The kernel's options with `kernel(...)` applied: `Kernel.layer(afterRun.options({ ... }))`. */
  readonly options: <EJ, EP, EA>(options: Kernel.Options<EJ, EP, EA>) => Kernel.Options<EJ, EP, EA>
  /** `Kernel.layer` with `options` applied: the kernel with memory and the run-end hook. */
  readonly kernelLayer: <EJ = never, EP = never, EA = never>(
    options: Kernel.Options<EJ, EP, EA>
  ) => ReturnType<typeof Kernel.layer<EJ, EP, EA>>
  /** Builds `Background` and runs the worker and the watchdog for the layer's lifetime. */
  readonly layer: Layer.Layer<Background.Background, InvalidArgument, Gateway.Gateway | Journal | ModelProvider>
}

const QUEUE_STATES = ["queued", "running"] as const

/**
 * Assemble the after-run parts (see the module notes). Options are checked when `layer` is built.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): AfterRun => {
  const store = options.store
  const memory = options.memory === false || store === undefined ? undefined : (options.memory ?? {})
  const learningOn = options.learning !== undefined && options.learning !== false
  // The hook is handed to the kernel before the learning service exists (it needs the kernel's
  // journal and model); a hook that fires first waits for it (hooks run in their own fiber).
  const learningReady = Deferred.unsafeMake<Option.Option<Learning.Service>>(FiberId.none)
  const journalReady = Deferred.unsafeMake<JournalService>(FiberId.none)
  const autoIngest = memory?.autoIngest === true
  /** The run's user messages as notes of its principal (`[memory] auto_ingest`). */
  const ingest = (run: Run, held: ReadonlyArray<TapeEvent> | undefined) =>
    Effect.gen(function* () {
      // The loop's events of the run when it handed them over (`RunEnd.events`), else the tape's.
      const events =
        held ?? (yield* Effect.flatMap(Deferred.await(journalReady), (journal) => readRunTape(journal, run)))
      const said = events.flatMap((e) => (e._tag === "UserMessage" && e.text.trim().length > 0 ? [e] : []))
      if (said.length === 0 || store === undefined) return
      yield* store.saveMany(
        said.map((e) => ({
          principal: run.principal,
          kind: "note" as const,
          text: e.text.slice(0, 4_000),
          sourceRunId: run.id,
          sourceSeq: e.tapeSeq
        }))
      )
    }).pipe(Effect.withSpan("AfterRun.ingest", { attributes: { runId: run.id } }))
  // Learning's verdict, once the service exists (a hook that fires first waits for it).
  const learn = (run: Run, events: ReadonlyArray<TapeEvent> | undefined) =>
    Effect.flatMap(Deferred.await(learningReady), (learning) =>
      Option.isSome(learning) ? Effect.asVoid(learning.value.afterRun(run, events)) : Effect.void
    )
  const runEnd: RunHooks.Service = {
    // Per run: only the parts that are on (one alone without `Effect.all`). Either part's failure is
    // dropped, as `Effect.all`'s `either` mode does, and learning runs even when the ingest failed.
    onRunEnd: ({ run, events }) =>
      autoIngest && learningOn
        ? Effect.all([ingest(run, events), learn(run, events)], { mode: "either", discard: true })
        : Effect.ignore(autoIngest ? ingest(run, events) : learn(run, events))
  }
  // Deterministic learning alone decides from the loop's events: a run it finds nothing in (a plain
  // turn) is counted at once — no run record read, no hook fiber, no wait for the service.
  if (learningOn && !autoIngest && (options.learning as LearningOptions).extractor !== "model") {
    RunHooks.withQuick(runEnd, (state: RunState, events: ReadonlyArray<TapeEvent>) =>
      Learning.worthReflecting(state, events) ? undefined : Learning.skipReflection
    )
  }
  // Nothing to do at a run's end without auto-ingest or learning: no hook, so the scheduler neither
  // reads the run's record nor forks a hook fiber per run.
  const runHooks = autoIngest || learningOn ? runEnd : RunHooks.none

  const kernel: AfterRun["kernel"] = (base) => {
    if (memory === undefined || store === undefined) return { ...base, tools: base.tools ?? [], runHooks }
    const tools = [
      ...(base.tools ?? []),
      ...(memory.tools === false ? [] : Memory.tools(store, { saveRisk: memory.saveRisk }))
    ]
    const promptAssembler =
      memory.inject === false
        ? base.promptAssembler
        : Memory.layer({
            inner: base.promptAssembler,
            tokenBudget: memory.tokenBudget,
            maxItems: memory.maxItems
          }).pipe(Layer.provide(Layer.succeed(MemoryStore, store)))
    return { promptAssembler, tools, runHooks }
  }

  const build = Effect.gen(function* () {
    const journal = yield* Journal
    yield* Deferred.succeed(journalReady, journal)
    const model = yield* ModelProvider
    const gateway = yield* Gateway.Gateway
    const queue = options.queue
    let learning: Learning.Service | undefined
    if (learningOn) {
      const lo = options.learning as LearningOptions
      if (store === undefined || queue === undefined) {
        yield* Deferred.succeed(learningReady, Option.none())
        return yield* new InvalidArgument({
          message: "learning needs a memory store and a task queue",
          field: "learning"
        })
      }
      learning = yield* Learning.make({
        queue,
        store,
        journal,
        model,
        extractor: lo.extractor ?? "deterministic",
        autoWriteThresholdBps: lo.autoWriteThresholdBps,
        minConfidenceBps: lo.minConfidenceBps,
        maxCandidates: lo.maxCandidates
      }).pipe(Effect.tapError(() => Deferred.succeed(learningReady, Option.none())))
    }
    yield* Deferred.succeed(learningReady, Option.fromNullable(learning))

    if (queue !== undefined) {
      const handlers = { ...(store === undefined ? {} : Memory.handlers(store)), ...(learning?.handlers ?? {}) }
      yield* TaskQueue.worker({ ...options.worker, handlers }).pipe(Effect.provideService(TaskQueue.TaskQueue, queue))
      const refresh = Effect.forEach(
        QUEUE_STATES,
        (state) =>
          Effect.flatMap(queue.list({ states: [state] }), (tasks) =>
            Metric.set(Background.tasksGauge.pipe(Metric.tagged("state", state)), tasks.length)
          ),
        { discard: true }
      ).pipe(Effect.catchAll((e) => Effect.logWarning("could not count background tasks", e)))
      yield* Effect.forkScoped(Effect.repeat(refresh, Schedule.spaced(options.metricsEvery ?? "15 seconds")))
      if (store !== undefined) {
        // Expired memory items are purged once a day (one task per day, whichever process enqueues it first).
        const purge = Effect.flatMap(Clock.currentTimeMillis, (now) =>
          queue.enqueue({ kind: Memory.PURGE, dedupeKey: `${Memory.PURGE}:${Math.floor(now / 86_400_000)}` })
        ).pipe(Effect.catchAll((e) => Effect.logWarning("could not schedule the memory purge", e)))
        yield* Effect.forkScoped(Effect.repeat(purge, Schedule.spaced("1 hour")))
      }
    }

    const watchdogOptions = options.watchdog === false ? undefined : options.watchdog
    const watchdog =
      watchdogOptions === undefined || watchdogOptions.mode === "off"
        ? undefined
        : yield* Watchdog.make({ gateway, journal, queue, processes: Processes.shared }, watchdogOptions)
    if (watchdog !== undefined) yield* watchdog.run

    yield* Effect.logInfo("after-run features on").pipe(
      Effect.annotateLogs({
        memory: memory !== undefined,
        learning: learning !== undefined,
        worker: queue !== undefined,
        watchdog: watchdog?.mode ?? "off"
      })
    )
    const background = Background.make({ queue, store, learning, watchdog })
    return { background }
  })

  /** The kernel's options with the parts applied; hooks it already had still run. */
  const withHooks = <EJ, EP, EA>(o: Kernel.Options<EJ, EP, EA>): Kernel.Options<EJ, EP, EA> => {
    const parts = kernel(o)
    return {
      ...o,
      ...parts,
      runHooks:
        o.runHooks === undefined
          ? parts.runHooks
          : parts.runHooks === RunHooks.none
            ? o.runHooks
            : RunHooks.all([o.runHooks, parts.runHooks])
    }
  }
  return {
    kernel,
    options: (o) => withHooks(o),
    kernelLayer: (o) => Kernel.layer(withHooks(o)),
    layer: Layer.scoped(
      Background.Background,
      Effect.map(build, ({ background }) => background)
    )
  }
}

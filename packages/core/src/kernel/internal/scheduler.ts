import { Deferred, Effect, ExecutionStrategy, Exit, Fiber, FiberMap, Option, Runtime, Scope, type Tracer } from "effect"
import type { JournalError, NotFound } from "../../domain/Errors.js"
import type { RunId, SessionId } from "../../domain/Ids.js"
import type { Run } from "../../domain/Records.js"
import { isTerminal } from "../../domain/RunState.js"
import type { TapeEvent } from "../../domain/TapeEvent.js"
import { isTracing } from "../../ports/internal/traced.js"
import { type Service as JournalService, requireRun } from "../../ports/Journal.js"
import { endOf, endState, guarded, none, quickOf as quickCheckOf, RunHooks } from "../RunHooks.js"
import { afterSend } from "./afterSend.js"

/**
 * Run admission: one run at a time per session, later ones queued in order. Running runs live in a
 * `FiberMap` keyed by run id, so cancelling is removing. The reason a run was cancelled is kept
 * until its loop has recorded it.
 * @internal
 */
export interface Scheduler {
  /** Queue a run of the session; starts a worker for the session when none runs. */
  readonly enqueue: (sessionId: SessionId, runId: RunId) => Effect.Effect<void>
  /**
   * Reserve an idle session (nothing active or queued) for this run, synchronously: later runs queue
   * behind it at once. The run is then "admitted, not started" until its worker picks it up: its
   * admission commits its start, then `startClaimed` forks the worker (or `unclaim` if the commit
   * failed). A cancel meanwhile takes it with `takeClaimed`, and the worker then skips it.
   */
  readonly claim: (sessionId: SessionId, runId: RunId) => boolean
  /** Start the worker of a session claimed with `claim` (its start committed). */
  readonly startClaimed: (sessionId: SessionId) => Effect.Effect<void>
  /** Give up a claim whose start did not commit (runs queued behind it meanwhile still run). */
  readonly unclaim: (sessionId: SessionId, runId: RunId) => Effect.Effect<void>
  /**
   * A cancel of a claimed run its worker has not picked up yet: true when this call took it (the
   * worker will never drive it; the caller records the cancellation, then `dequeue`s it); false
   * when it is not claimed (then it is running, queued the usual way, or over).
   */
  readonly takeClaimed: (runId: RunId) => boolean
  /** Give a taken run back (its cancellation did not commit): it is driven as if never taken. */
  readonly untake: (sessionId: SessionId, runId: RunId) => Effect.Effect<void>
  /** The run a new run of this session would queue behind, if any. */
  readonly lastOf: (sessionId: SessionId) => RunId | undefined
  /** Interrupt a running run (its loop records the cancellation); false when it is not running. */
  readonly interrupt: (runId: RunId, by: string) => Effect.Effect<boolean>
  /** Drop a queued run that was cancelled before it started. */
  readonly dequeue: (sessionId: SessionId, runId: RunId) => Effect.Effect<void>
  /** Who asked to cancel this run, if anyone (read by the loop when it is interrupted). */
  readonly cancelledBy: (runId: RunId) => string | undefined
  /**
   * Call `f` when the run's loop has ended — at once if its end hooks already ran (the run ended
   * in the last few thousand ends); otherwise it waits for the run's end.
   */
  readonly onEnd: (runId: RunId, f: () => void) => void
  /** Wait until the run is terminal. */
  readonly awaitEnd: (runId: RunId) => Effect.Effect<Run, JournalError | NotFound>
}

const HOOKS_RAN_KEPT = 4096

/** @internal */
export const makeScheduler = (
  journal: JournalService,
  /** Runs the run's loop; it answers the run's events when it ended the run (`RunHooks.RunEnd.events`). */
  drive: (
    runId: RunId,
    cancelledBy: () => string | undefined
  ) => Effect.Effect<ReadonlyArray<TapeEvent> | undefined | void, unknown>
): Effect.Effect<Scheduler, never, Scope.Scope> =>
  Effect.gen(function* () {
    const scope = yield* Effect.scope
    const runHooks = yield* RunHooks
    const fibers = yield* FiberMap.make<RunId>()
    // The runs started on their admission's claim (no worker): stopped together at shutdown, as the
    // FiberMap's are — the scope's own finalizers run one after another.
    const claimedScope = yield* Scope.fork(scope, ExecutionStrategy.parallel)
    // …and together with the FiberMap's runs (those a worker launched: queued behind another, picked
    // up at start), which the Gateway scope would otherwise reach only after these.
    yield* Scope.addFinalizer(
      claimedScope,
      Effect.suspend(() => Fiber.interruptAll(Array.from(fibers, ([, fiber]) => fiber)))
    )
    // Runs admitted with their start, not picked up by their worker yet ("admitted, not started").
    const claimed = new Set<RunId>()
    // Claimed runs a cancel took before their worker picked them up: the worker skips them.
    const taken = new Set<RunId>()
    const queues = new Map<SessionId, Array<RunId>>()
    const active = new Map<SessionId, RunId>()
    const cancels = new Map<RunId, string>()
    // Runs whose own fiber is ending their turn (`finish`): not cancellable any more.
    const finishing = new Set<RunId>()
    const endHooks = new Map<RunId, Array<() => void>>()
    // The runs whose end hooks ran most recently (oldest first, at most HOOKS_RAN_KEPT): `onEnd`
    // for one of them calls back at once. The Gateway registers a run's right after its admission,
    // so only a run that ended within that moment is looked for here.
    const hooksRan = new Set<RunId>()
    const endWaiters = new Map<RunId, Array<(run: Run) => void>>()

    const quickCheck = quickCheckOf(runHooks)
    /**
     * The hooks' whole work for a run whose loop ended it with `events`, when they can tell from those
     * alone — and nobody reads spans: with a tracer installed the hooks run as `onRunEnd` does, with
     * its spans (`RunHooks.onRunEnd` and the hooks' own).
     */
    const quickOf = (
      runId: RunId,
      events: ReadonlyArray<TapeEvent> | undefined,
      tracer: Tracer.Tracer
    ): Effect.Effect<void> | undefined => {
      if (events === undefined || quickCheck === undefined || isTracing(tracer)) return undefined
      const state = endState(events)
      if (state === undefined || !isTerminal(state)) return undefined
      let quick: Effect.Effect<void> | undefined
      try {
        quick = quickCheck(state, events)
      } catch {
        return undefined // a hook's check that throws: its `onRunEnd` decides, as without one
      }
      return quick === undefined
        ? undefined
        : Effect.catchAllCause(quick, (cause) =>
            Effect.logWarning("an after-run hook failed", cause).pipe(Effect.annotateLogs("runId", runId))
          )
    }

    // A run's end in two parts. `endNow` is what must happen before the session's next run starts:
    // its cancel forgotten, its end hooks (the approvers' hold released — a next run's "is anyone
    // there to approve?" must not count it), the hooks' quick verdict (`RunHooks.Quick`: before the
    // next run). `endLater` is the rest — the record read for its waiters, the hooks' own fiber —
    // which may wait for the check phase (`afterSend`).
    const endNow = (
      runId: RunId,
      events: ReadonlyArray<TapeEvent> | undefined,
      tracer: Tracer.Tracer
    ): Effect.Effect<void> => {
      cancels.delete(runId)
      hooksRan.add(runId)
      if (hooksRan.size > HOOKS_RAN_KEPT) hooksRan.delete(hooksRan.values().next().value!)
      const hooks = endHooks.get(runId)
      if (hooks !== undefined) {
        endHooks.delete(runId)
        for (const f of hooks) f()
      }
      // No after-run hook is configured: only a waiter needs the run's record.
      if (runHooks === none) return Effect.void
      // The hooks' quick verdict from the loop's events (a plain turn's learning check): then nobody
      // but a waiter needs the run's record, and the hooks need no fiber of their own.
      const quick = quickOf(runId, events, tracer)
      if (quick === undefined) return Effect.void
      quickDone.add(runId)
      return quick
    }
    // Runs whose hooks had their quick verdict (`endNow`): `endLater` forks no `onRunEnd` for them.
    const quickDone = new Set<RunId>()
    // Plain steps, once per run (no generator): the record's read is the only await.
    const endLater = (runId: RunId, events: ReadonlyArray<TapeEvent> | undefined): Effect.Effect<void> =>
      Effect.suspend(() => {
        const quick = quickDone.delete(runId)
        // Nobody waits for this run and its hooks are done (or none is configured): nothing needs its record.
        if (!endWaiters.has(runId) && (quick || runHooks === none)) return Effect.void
        return Effect.matchEffect(journal.getRun(runId), {
          onFailure: () => Effect.void,
          onSuccess: (run) => {
            if (Option.isNone(run) || !isTerminal(run.value.state)) return Effect.void
            const waiters = endWaiters.get(runId)
            if (waiters !== undefined) {
              endWaiters.delete(runId)
              for (const f of waiters) f(run.value)
            }
            // After-run hooks: in their own fiber, so they never delay the run's end.
            return runHooks === none || quick
              ? Effect.void
              : Effect.asVoid(Effect.forkIn(guarded(runHooks, endOf(run.value, events)), scope))
          }
        })
      })
    const ended = (runId: RunId, events?: ReadonlyArray<TapeEvent> | undefined): Effect.Effect<void> =>
      Effect.withFiberRuntime((fiber) =>
        Effect.zipRight(endNow(runId, events, fiber.currentTracer), endLater(runId, events))
      )

    type Driven = ReadonlyArray<TapeEvent> | undefined | void
    const eventsOf = (exit: Exit.Exit<Driven, unknown>) =>
      Exit.isSuccess(exit) && exit.value !== undefined ? exit.value : undefined

    // Picking a run up and forking its loop into the map is one synchronous step (what
    // `FiberMap.run` does, plus the claim check): a cancel finds the run claimed or running.
    const launch = (parent: Fiber.RuntimeFiber<unknown, unknown>, sessionId: SessionId, next: RunId) => {
      claimed.delete(next)
      active.set(sessionId, next)
      const runtime = Runtime.make({
        context: parent.currentContext,
        fiberRefs: parent.getFiberRefs(),
        runtimeFlags: Runtime.defaultRuntime.runtimeFlags
      })
      // The run's end runs in its own fiber's exit (uninterruptible, whatever ended the loop — its
      // end, a cancel, a shutdown), as a claimed run's `finish` does; its worker awaits it.
      const forked = Runtime.runFork(runtime)(
        Effect.onExit(
          drive(next, () => cancels.get(next)),
          (exit) =>
            Effect.withFiberRuntime<void>((self) => {
              finishing.add(next)
              const events = eventsOf(exit)
              return Effect.flatMap(endNow(next, events, self.currentTracer), () => {
                // The session's next queued run is this worker's to start, after this end.
                active.delete(sessionId)
                return Effect.zipRight(afterSend, endLater(next, events))
              }).pipe(Effect.ensuring(Effect.sync(() => finishing.delete(next))))
            })
        )
      )
      FiberMap.unsafeSet(fibers, next, forked, { interruptAs: parent.id() })
      return forked
    }

    const worker = (sessionId: SessionId): Effect.Effect<void> =>
      Effect.gen(function* () {
        while (true) {
          const next = queues.get(sessionId)?.shift()
          if (next === undefined) {
            queues.delete(sessionId)
            return
          }
          const fiber = yield* Effect.withFiberRuntime<Fiber.RuntimeFiber<Driven, unknown> | undefined>((parent) =>
            Effect.succeed(taken.delete(next) ? undefined : launch(parent, sessionId, next))
          )
          if (fiber === undefined) continue
          // The run's end is part of its fiber (`launch`): awaited, the next queued run may start.
          // At shutdown this await is interrupted first; the run's fiber is stopped with the other
          // runs (the claimed scope's finalizer, in parallel) and still ends.
          yield* Fiber.await(fiber)
        }
      })

    // A claimed run (its session idle, its start committed) is driven on the fiber its admission
    // forks — the one a worker would have used to fork it into a fiber of its own: one fiber per turn
    // fewer. Its first step picks the run up as the worker does (one synchronous step: a cancel finds
    // it claimed, or running in the map, or taken — then the worker's rules skip it); its end is
    // what the worker does after its `Fiber.await`, in a finalizer (uninterruptible, whatever the
    // loop's exit), and a worker is started only for runs queued behind it meanwhile.
    const claimedRun = (sessionId: SessionId): Effect.Effect<void> =>
      Effect.withFiberRuntime<void>((self) => {
        const queue = queues.get(sessionId)
        const next = queue?.[0]
        if (queue === undefined || next === undefined || !claimed.has(next)) return worker(sessionId)
        queue.shift()
        claimed.delete(next)
        active.set(sessionId, next)
        FiberMap.unsafeSet(fibers, next, self)
        return Effect.ignore(
          Effect.onExit(
            drive(next, () => cancels.get(next)),
            finish(sessionId, next)
          )
        )
      })
    // The session is free as soon as the loop is over and the end's urgent part ran (`endNow`): its
    // next message claims it, or the runs queued behind it start. The rest of the run's end — the
    // record read for its waiters, the hooks' own fiber — waits for the check phase after that
    // (`afterSend`), so the frames its end commit wrote to its streams (and every other run's ending
    // in the same journal answer) are sent before that work, not behind it.
    const finish = (sessionId: SessionId, runId: RunId) => (exit: Exit.Exit<Driven, unknown>) =>
      Effect.withFiberRuntime<void>((self) => {
        // Its loop is over: a cancel from now on finds it ended, as after the worker's await.
        finishing.add(runId)
        const events = eventsOf(exit)
        const done = () => finishing.delete(runId)
        return endNow(runId, events, self.currentTracer).pipe(
          Effect.flatMap(() => {
            // One synchronous step: the session freed and its empty queue dropped together (an
            // admission in between would enqueue into a queue no worker will ever drain).
            active.delete(sessionId)
            const queue = queues.get(sessionId)
            const later = Effect.zipRight(afterSend, endLater(runId, events))
            if (queue !== undefined && queue.length === 0) queues.delete(sessionId)
            else if (queue !== undefined) return Effect.zipRight(startWorker(sessionId), later)
            return later
          }),
          // `ensuring` without its mask: this runs as the loop's exit finalizer (`onExit`), already
          // uninterruptible, so both handlers always run.
          Effect.matchCauseEffect({
            onFailure: (cause) => {
              done()
              return Effect.failCause(cause)
            },
            onSuccess: () => {
              done()
              return Effect.void
            }
          })
        )
      })

    const enqueue: Scheduler["enqueue"] = (sessionId, runId) =>
      Effect.suspend(() => {
        const queue = queues.get(sessionId)
        if (queue !== undefined) {
          queue.push(runId)
          return Effect.void
        }
        queues.set(sessionId, [runId])
        // Interruptible whatever the caller's region (admission enqueues uninterruptibly, and a
        // forked fiber inherits that): runs must stay cancellable and the scope must close them.
        return startWorker(sessionId)
      })

    const claim: Scheduler["claim"] = (sessionId, runId) => {
      if (queues.has(sessionId) || active.has(sessionId)) return false
      queues.set(sessionId, [runId])
      claimed.add(runId)
      return true
    }
    const startWorker = (sessionId: SessionId) =>
      Effect.asVoid(Effect.forkIn(Effect.interruptible(worker(sessionId)), scope))
    const startClaimed: Scheduler["startClaimed"] = (sessionId) =>
      Effect.asVoid(Effect.forkIn(Effect.interruptible(claimedRun(sessionId)), claimedScope))
    const unclaim: Scheduler["unclaim"] = (sessionId, runId) =>
      Effect.suspend(() => {
        claimed.delete(runId)
        taken.delete(runId)
        const queue = queues.get(sessionId)
        const i = queue?.indexOf(runId) ?? -1
        if (queue && i >= 0) queue.splice(i, 1)
        if (queue === undefined) return Effect.void
        // No worker runs for a claimed session yet: start one for the runs queued behind the claim.
        if (queue.length === 0) {
          queues.delete(sessionId)
          return Effect.void
        }
        return startWorker(sessionId)
      })
    const takeClaimed: Scheduler["takeClaimed"] = (runId) => {
      if (!claimed.delete(runId)) return false
      taken.add(runId)
      return true
    }

    const untake: Scheduler["untake"] = (sessionId, runId) =>
      Effect.suspend(() => {
        // Not reached by its worker yet: claimed again. Already skipped: queued again.
        if (taken.delete(runId)) {
          claimed.add(runId)
          return Effect.void
        }
        return enqueue(sessionId, runId)
      })

    const dequeue: Scheduler["dequeue"] = (sessionId, runId) =>
      Effect.suspend(() => {
        const queue = queues.get(sessionId)
        const i = queue?.indexOf(runId) ?? -1
        if (queue && i >= 0) {
          queue.splice(i, 1)
          // Its worker will never reach it now, so it will not clear the mark of a taken run either.
          taken.delete(runId)
        }
        return ended(runId)
      })

    const interrupt: Scheduler["interrupt"] = (runId, by) =>
      Effect.gen(function* () {
        if (finishing.has(runId) || !(yield* FiberMap.has(fibers, runId))) return false
        cancels.set(runId, by)
        yield* FiberMap.remove(fibers, runId)
        cancels.delete(runId) // its fiber is over (its loop read it): a run already ending keeps none
        return true
      })

    // Register first, then read: a run that ends in between is seen by one or the other.
    const awaitEnd: Scheduler["awaitEnd"] = (runId) =>
      Effect.acquireUseRelease(
        Effect.map(Deferred.make<Run>(), (done) => {
          const cb = (r: Run) => Deferred.unsafeDone(done, Exit.succeed(r))
          endWaiters.set(runId, [...(endWaiters.get(runId) ?? []), cb])
          return { done, cb }
        }),
        ({ done }) =>
          Effect.flatMap(requireRun(journal, runId), (run) =>
            isTerminal(run.state) ? Effect.succeed(run) : Deferred.await(done)
          ),
        ({ cb }) =>
          Effect.sync(() => {
            const left = (endWaiters.get(runId) ?? []).filter((f) => f !== cb)
            if (left.length === 0) endWaiters.delete(runId)
            else endWaiters.set(runId, left)
          })
      )

    return {
      enqueue,
      claim,
      startClaimed,
      unclaim,
      takeClaimed,
      untake,
      dequeue,
      interrupt,
      awaitEnd,
      lastOf: (sessionId) => queues.get(sessionId)?.at(-1) ?? active.get(sessionId),
      cancelledBy: (runId) => cancels.get(runId),
      onEnd: (runId, f) => {
        // A run whose end hooks already ran (its end begun or recently over): at once — a hook
        // stored for it would never run (an approval hold counted for the session's next run) and
        // never be freed. (Only runs seen ending count: a run a cancel took and its worker skipped
        // is still live until that cancel settles, and may be driven again.)
        if (hooksRan.has(runId)) return f()
        const hooks = endHooks.get(runId) ?? []
        hooks.push(f)
        endHooks.set(runId, hooks)
      }
    }
  })

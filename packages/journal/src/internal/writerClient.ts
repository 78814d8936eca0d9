import { existsSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { pathToFileURL } from "node:url"
import { Worker } from "node:worker_threads"
import { Errors } from "@palyra/core"
import type Database from "better-sqlite3"
import { Effect, Runtime, type Scope } from "effect"
import { encodeBatch, type FromWorker, type Op, type OpResult, type ToWorker } from "./protocol.js"
import {
  type CheckpointPolicy,
  configureConnection,
  DEFAULT_POLICY,
  makeCheckpointer,
  QUIET_MS,
  warnOnce
} from "./walCheckpoint.js"
import { makeWriter } from "./writer.js"
import type { WorkerOptions } from "./writer-worker.js"

/** Where the journal's writes are committed. @internal */
export type WriterMode = "worker" | "inline"

/**
 * The default writer, by measurement (`bench/journal`, PERF-NOTES round 4): the worker keeps
 * commits off the event loop (its p99 delay) and lets redaction/encoding on this thread overlap the
 * commits on the other.
 * @internal
 */
export const DEFAULT_WRITER: WriterMode = "worker"

/**
 * The journal's side of its writer: `submit` hands over one write and calls `done` once it
 * committed (or failed), in submission order; `readHead` answers a session's committed head;
 * `close` commits everything submitted, then stops the writer.
 * @internal
 */
export interface Backend {
  readonly submit: (op: Op, done: (result: OpResult) => void) => void
  readonly readHead: (sessionId: string) => number | null
  readonly close: Effect.Effect<void>
}

interface Pending {
  readonly op: Op
  readonly done: (result: OpResult) => void
}

/** Core's error for a writer's typed failure. @internal */
export const toError = (
  method: string,
  r: OpResult & { ok: false }
): Errors.NotFound | Errors.Conflict | Errors.JournalError =>
  r.tag === "NotFound"
    ? new Errors.NotFound({ entity: r.entity ?? "record", id: r.id ?? "" })
    : r.tag === "Conflict"
      ? new Errors.Conflict({ message: r.message })
      : new Errors.JournalError({ method, message: r.message })

const countAppends = (batch: ReadonlyArray<Pending>) => {
  let n = 0
  for (const p of batch) if (p.op.op === "append") n++
  return n
}

/**
 * The writer on this thread. Appends go into an array; one `setImmediate` commits up to `maxBatch`
 * of them in one transaction and calls each `done` from the same callback (no queue, deferred or
 * fiber per append). What is left waits for the next turn of the event loop, so I/O and timers run
 * between batches. Other writes commit at once, in their own transaction (as they always did).
 * With a `filename` (a writable file), the WAL is checkpointed as the worker does it
 * (`walCheckpoint.ts`): when a batch's callbacks queued nothing more, not inside a commit.
 * @internal
 */
export const inlineBackend = (
  db: Database.Database,
  maxBatch: number,
  recordMetric: (ms: number, appends: number) => void,
  filename?: string | undefined,
  policy: CheckpointPolicy = DEFAULT_POLICY
): Effect.Effect<Backend> =>
  Effect.sync(() => {
    const writer = makeWriter(db, maxBatch)
    let queued: Array<Pending> = []
    let scheduled: ReturnType<typeof setImmediate> | undefined
    if (filename !== undefined) configureConnection(db, policy)
    const checkpointer =
      filename === undefined ? undefined : makeCheckpointer(db, filename, policy, undefined, warnOnce())
    let idleCheck: ReturnType<typeof setImmediate> | undefined
    // Re-armed after every batch: fires once nothing was committed for QUIET_MS.
    const quiet = checkpointer && setTimeout(() => checkpointer.idle(true), QUIET_MS).unref()
    const idle = () => {
      idleCheck = undefined
      if (queued.length > 0) return
      checkpointer!.idle()
      quiet!.refresh()
    }
    const deliver = (batch: ReadonlyArray<Pending>) => {
      const t0 = performance.now()
      const results = writer.commit(batch.map((p) => p.op))
      recordMetric(performance.now() - t0, batch.length)
      for (let i = 0; i < batch.length; i++) batch[i]!.done(results[i]!)
    }
    const flush = () => {
      scheduled = undefined
      const batch = queued.length <= maxBatch ? queued : queued.splice(0, maxBatch)
      if (batch === queued) queued = []
      if (queued.length > 0) scheduled = setImmediate(flush)
      deliver(batch)
      // Idle once the callbacks queued nothing more (checked after them, on the next turn).
      if (checkpointer !== undefined && queued.length === 0 && idleCheck === undefined) idleCheck = setImmediate(idle)
    }
    return {
      submit: (op, done) => {
        if (op.op !== "append") return done(writer.commit([op])[0]!)
        queued.push({ op, done })
        if (scheduled === undefined) scheduled = setImmediate(flush)
      },
      readHead: writer.readHead,
      // Commit whatever is still queued, synchronously (the file's finalizer closes it next — once a
      // checkpoint's fsync under way has answered: walCheckpoint.ts).
      close: Effect.async<void>((resume) => {
        if (scheduled !== undefined) clearImmediate(scheduled)
        if (idleCheck !== undefined) clearImmediate(idleCheck)
        if (quiet !== undefined) clearTimeout(quiet)
        scheduled = undefined
        idleCheck = undefined
        while (queued.length > 0) deliver(queued.splice(0, maxBatch))
        if (checkpointer === undefined) return resume(Effect.void)
        checkpointer.close(() => resume(Effect.void))
      })
    }
  })

/** Batches posted and not yet answered, at most: one committing, one on its way. */
const MAX_IN_FLIGHT = 2

/** The sources the worker bundle is built from (tsup.config.ts), to tell whether a build is current. */
const workerSources = [
  "./writer-worker.ts",
  "./writer.ts",
  "./protocol.ts",
  "./chain.ts",
  "./walCheckpoint.ts",
  "./commitTrace.ts",
  "./threadPriority.ts",
  "../../build/core-canonical.ts",
  "../../../core/src/domain/Canonical.ts"
]

/** Whether the built bundle is at least as new as every source it is built from. */
const isCurrent = (bundle: URL): boolean => {
  try {
    const built = statSync(bundle).mtimeMs
    return workerSources.every((source) => statSync(new URL(source, import.meta.url)).mtimeMs <= built)
  } catch {
    return false
  }
}

/**
 * The worker script: built (next to this bundle, or the package's own), or — running from sources
 * (tests, `tsx`) — the package's built bundle when it is current (a self-contained file that starts
 * in milliseconds), else the sources under tsx (which load core and effect: a second or two).
 */
const workerScript = (): { readonly url: URL; readonly execArgv?: Array<string> } => {
  if (import.meta.url.endsWith(".ts")) {
    const built = new URL("../../dist/writer-worker.js", import.meta.url)
    if (isCurrent(built)) return { url: built }
    return {
      url: new URL("./writer-worker.ts", import.meta.url),
      // tsx resolved from this package (a bare `--import tsx` resolves from the process's working
      // directory, which need not be inside the repository) — through `createRequire`, since
      // `import.meta.resolve` is missing under some loaders (vitest's module runner).
      execArgv: [
        ...process.execArgv,
        "--conditions=@palyra/source",
        "--import",
        pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href
      ]
    }
  }
  const sibling = new URL("./writer-worker.js", import.meta.url)
  // Bundled into another package (palyrad): the journal package's own build.
  return { url: existsSync(sibling) ? sibling : new URL(import.meta.resolve("@palyra/journal/writer-worker")) }
}

/**
 * The writer in a worker thread that owns the write connection (this thread keeps its own
 * connection for reads: in WAL mode a read sees every commit answered before it started). Writes
 * queue here and cross as one message per batch (two strings), at most `MAX_IN_FLIGHT` batches at a time (what
 * arrives meanwhile forms the next batch: group commit across the thread boundary). The worker
 * commits before it answers, so nothing is acknowledged that a crash could lose. If the worker dies,
 * everything unanswered and every later write fails with `JournalError`.
 *
 * Session heads: the worker owns them for writing; this thread keeps a bounded copy advanced by
 * answers (read from the index on a miss), so `headSeq` is never behind an acknowledged append.
 * @internal
 */
export const workerBackend = (
  options: {
    readonly filename: string
    readonly synchronous?: "NORMAL" | "FULL" | undefined
    readonly busyTimeoutMs?: number | undefined
    readonly onWorker?: ((worker: Worker) => void) | undefined
    readonly onWriterStopped?: ((reason: string) => void) | undefined
    readonly checkpoint?: CheckpointPolicy | undefined
  },
  maxBatch: number,
  st: { readonly sessionExists: Database.Statement; readonly maxSeq: Database.Statement },
  recordMetric: (ms: number, appends: number) => void
): Effect.Effect<Backend, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const runtime = yield* Effect.runtime<never>()
    const workerData: WorkerOptions = {
      filename: options.filename,
      synchronous: options.synchronous ?? "NORMAL",
      busyTimeoutMs: options.busyTimeoutMs ?? 5000,
      maxBatch,
      checkpoint: options.checkpoint ?? DEFAULT_POLICY
    }
    const worker = yield* Effect.try({
      try: () => {
        const script = workerScript()
        return new Worker(script.url, { workerData, ...(script.execArgv ? { execArgv: script.execArgv } : {}) })
      },
      catch: (cause) =>
        new Errors.JournalError({
          method: "open",
          message: `the journal's writer thread did not start (${cause}): ship @palyra/journal's dist/writer-worker.js, or open the journal with writer: "inline"`,
          cause
        })
    })
    options.onWorker?.(worker)
    // Only keep the process alive while writes are outstanding.
    worker.unref()

    const heads = new Map<string, number>()
    const advance = (sessionId: string, seq: number) => {
      const current = heads.get(sessionId)
      heads.delete(sessionId)
      heads.set(sessionId, current === undefined ? seq : Math.max(current, seq))
      if (heads.size > 4096) heads.delete(heads.keys().next().value!)
    }
    const readHead = (sessionId: string): number | null => {
      const cached = heads.get(sessionId)
      if (cached !== undefined) return cached
      if (!st.sessionExists.get(sessionId)) return null
      const seq = (st.maxSeq.get(sessionId) as { seq: number | null }).seq ?? 0
      advance(sessionId, seq)
      return seq
    }

    let queued: Array<Pending> = []
    const inFlight = new Map<number, ReadonlyArray<Pending>>()
    let nextId = 0
    let scheduled: ReturnType<typeof setImmediate> | undefined
    let stopped: OpResult | undefined
    let exited = false
    let closing = false
    const onExit: Array<() => void> = []
    const onIdle: Array<() => void> = []

    const post = () => {
      scheduled = undefined
      while (queued.length > 0 && inFlight.size < MAX_IN_FLIGHT && stopped === undefined) {
        const batch = queued
        queued = []
        const id = nextId++
        const { header, payloads } = encodeBatch(batch.map((p) => p.op))
        if (inFlight.size === 0) worker.ref()
        inFlight.set(id, batch)
        const message: ToWorker = { type: "batch", id, header, payloads }
        worker.postMessage(message)
      }
    }
    const schedule = () => {
      if (scheduled === undefined) scheduled = setImmediate(post)
    }
    const idle = () => {
      if (inFlight.size === 0 && queued.length === 0) for (const f of onIdle.splice(0)) f()
    }

    worker.on("message", (reply: FromWorker) => {
      const batch = inFlight.get(reply.id)
      if (batch === undefined) return
      inFlight.delete(reply.id)
      if (inFlight.size === 0) worker.unref()
      recordMetric(reply.ms, countAppends(batch))
      const { seqs, results } = reply
      for (let i = 0; i < batch.length; i++) {
        const p = batch[i]!
        const r: OpResult = seqs !== undefined ? { ok: true, seq: seqs[i]! } : results[i]!
        if (r.ok && p.op.op === "append" && r.seq !== undefined) advance(p.op.sessionId, r.seq + p.op.events.length - 1)
        p.done(r)
      }
      if (queued.length > 0) schedule()
      idle()
    })
    const stop = (message: string) => {
      if (stopped !== undefined) return
      stopped = { ok: false, tag: "JournalError", message }
      const failure = stopped
      const lost = [...inFlight.values()].flat().concat(queued)
      if (!closing) {
        Runtime.runFork(runtime)(
          Effect.logError("the journal's writer thread stopped: every later write fails").pipe(
            Effect.annotateLogs({ reason: message, unanswered: lost.length })
          )
        )
        options.onWriterStopped?.(message)
      }
      inFlight.clear()
      queued = []
      for (const p of lost) p.done(failure)
      idle()
    }
    worker.on("error", (error) => stop(`the journal's writer failed: ${error.message}`))
    worker.on("messageerror", (error) => {
      stop(`the journal's writer sent an unreadable answer: ${error.message}`)
      // Its own close, not `terminate`: a terminated thread never hears a checkpoint's fsync under
      // way, and its connections would close over pages not known to be on disk (walCheckpoint.ts).
      // `terminate` only if it does not exit by itself.
      const message: ToWorker = { type: "close" }
      worker.postMessage(message)
      setTimeout(() => {
        if (!exited) void worker.terminate()
      }, 10_000).unref()
    })
    worker.on("exit", (code) => {
      exited = true
      stop(`the journal's writer stopped (exit code ${code})`)
      for (const f of onExit.splice(0)) f()
    })

    const close = Effect.async<void>((resume) => {
      const finish = () => {
        if (exited) return resume(Effect.void)
        closing = true
        worker.ref()
        onExit.push(() => resume(Effect.void))
        const message: ToWorker = { type: "close" }
        worker.postMessage(message)
      }
      if (scheduled !== undefined) clearImmediate(scheduled)
      post()
      if (inFlight.size === 0 && queued.length === 0) return finish()
      onIdle.push(() => finish())
      // What waits for a free slot goes out as answers come in.
      schedule()
    })

    return {
      submit: (op, done) => {
        if (stopped !== undefined) return done(stopped)
        queued.push({ op, done })
        schedule()
      },
      readHead,
      close
    } satisfies Backend
  })

import { spawn } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Worker } from "node:worker_threads"
import { describe, expect, it } from "@effect/vitest"
import { Errors, Records } from "@palyra/core"
import { Deferred, Effect, Either, Exit, Scope } from "effect"
import { SqliteJournal, SqliteTaskQueue } from "../src/index.js"
import { sessionIdOf, userMessage } from "./fixtures/tape.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-worker-"))
const sid = (i: number) => sessionIdOf(i)
const delta = userMessage

/** Another process holds the file's write lock for `ms`; resolves once it holds it. */
const holdLock = (filename: string, ms: number) =>
  Effect.async<void>((resume) => {
    const child = spawn(process.execPath, [join(import.meta.dirname, "fixtures/hold-lock.mjs"), filename, String(ms)], {
      cwd: import.meta.dirname,
      stdio: ["ignore", "pipe", "inherit"]
    })
    child.stdout.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("locked")) resume(Effect.void)
    })
  })

/**
 * Main-thread timer callbacks (a 5 ms `setTimeout` chain) that ran while one append was waiting to
 * commit behind another process's write lock, held for 1.5 s.
 */
const ticksWhileCommitBlocked = (writer: SqliteJournal.WriterMode) =>
  Effect.gen(function* () {
    const filename = join(dir, `blocked-${writer}.db`)
    const scope = yield* Scope.make()
    const j = yield* SqliteJournal.make({ filename, writer }).pipe(Scope.extend(scope))
    yield* j.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
    yield* j.append(sid(0), [delta(sid(0), 0)])
    yield* holdLock(filename, 1500)
    let ticks = 0
    let timer: ReturnType<typeof setTimeout> | undefined
    const tick = () => {
      ticks++
      timer = setTimeout(tick, 5)
    }
    timer = setTimeout(tick, 5)
    const stored = yield* j.append(sid(0), [delta(sid(0), 1)])
    clearTimeout(timer)
    expect(stored.map((e) => e.tapeSeq)).toEqual([2])
    yield* Scope.close(scope, Exit.void)
    return ticks
  })

describe("the writer in a worker thread", () => {
  it.live(
    "a commit that waits for the write lock does not block the main thread (inline, it does)",
    () =>
      Effect.gen(function* () {
        // The worker waits in SQLite's busy handler on its own thread: timers here keep firing.
        expect(yield* ticksWhileCommitBlocked("worker")).toBeGreaterThan(10)
        // Inline, the same wait sleeps this thread: not one timer runs until the lock is released.
        expect(yield* ticksWhileCommitBlocked("inline")).toBeLessThanOrEqual(1)
      }),
    30_000
  )

  it.live(
    "a store beside the journal (task queue) waits for a held write lock without sleeping the main thread",
    () =>
      Effect.gen(function* () {
        const filename = join(dir, "store-blocked.db")
        const scope = yield* Scope.make()
        const q = yield* SqliteTaskQueue.make({ filename }).pipe(Scope.extend(scope))
        yield* q.enqueue({ kind: "k", payload: { n: 0 } })
        yield* holdLock(filename, 1500)
        let ticks = 0
        let timer: ReturnType<typeof setTimeout> | undefined
        const tick = () => {
          ticks++
          timer = setTimeout(tick, 5)
        }
        timer = setTimeout(tick, 5)
        const task = yield* q.enqueue({ kind: "k", payload: { n: 1 } })
        clearTimeout(timer)
        expect(task.kind).toBe("k")
        expect(ticks).toBeGreaterThan(10)
        expect((yield* q.list({})).length).toBe(2)
        yield* Scope.close(scope, Exit.void)
      }),
    30_000
  )

  it.live(
    "a crashed worker fails what it had not answered, and every later write, with JournalError; nothing acknowledged is lost",
    () =>
      Effect.gen(function* () {
        const filename = join(dir, "crash.db")
        const started = yield* Deferred.make<Worker>()
        const stopped: Array<string> = []
        const scope = yield* Scope.make()
        const j = yield* SqliteJournal.make({
          filename,
          writer: "worker",
          onWorker: (worker) => Deferred.unsafeDone(started, Exit.succeed(worker)),
          onWriterStopped: (reason) => stopped.push(reason)
        }).pipe(Scope.extend(scope))
        const worker = yield* Deferred.await(started)
        for (let s = 0; s < 4; s++) yield* j.createSession(Records.makeSession({ id: sid(s), principal: "p" }))
        // Appends keep coming from four fibers while the worker is terminated under them.
        const outcomes = yield* Effect.forEach(
          [0, 1, 2, 3],
          (s) =>
            Effect.forEach(
              Array.from({ length: 400 }, (_, i) => i),
              (i) => Effect.either(j.append(sid(s), [delta(sid(s), i)])),
              { concurrency: 1 }
            ),
          { concurrency: "unbounded" }
        ).pipe(
          Effect.zipLeft(
            Effect.gen(function* () {
              yield* Effect.sleep("20 millis")
              yield* Effect.promise(() => worker.terminate())
            }),
            { concurrent: true }
          )
        )
        const failures = outcomes.flat().filter(Either.isLeft)
        expect(failures.length).toBeGreaterThan(0)
        for (const f of failures) expect(f.left).toBeInstanceOf(Errors.JournalError)
        // Later writes of every kind fail the same way, at once.
        expect(yield* Effect.flip(j.append(sid(0), [delta(sid(0), 9999)]))).toBeInstanceOf(Errors.JournalError)
        expect(yield* Effect.flip(j.createSession(Records.makeSession({ id: sid(9), principal: "p" })))).toBeInstanceOf(
          Errors.JournalError
        )
        // The owner was told, once.
        expect(stopped).toHaveLength(1)
        expect(stopped[0]).toMatch(/writer stopped/)
        yield* Scope.close(scope, Exit.void)

        // Reopened: every acknowledged append is there, in order, and the chains verify.
        const reopened = yield* Scope.make()
        const quietlyClosed: Array<string> = []
        const again = yield* SqliteJournal.make({ filename, onWriterStopped: (r) => quietlyClosed.push(r) }).pipe(
          Scope.extend(reopened)
        )
        for (let s = 0; s < 4; s++) {
          const acked = outcomes[s]!.filter(Either.isRight).flatMap((r) => r.right.map((e) => e.tapeSeq))
          const tape = (yield* again.readTape(sid(s), { afterSeq: 0 })).map((e) => e.tapeSeq)
          expect(tape.slice(0, acked.length)).toEqual(acked)
          expect(tape).toEqual(Array.from({ length: tape.length }, (_, i) => i + 1))
        }
        expect((yield* again.verify).ok).toBe(true)
        // And it writes again.
        expect((yield* again.append(sid(0), [delta(sid(0), 10_000)])).length).toBe(1)
        yield* Scope.close(reopened, Exit.void)
        // A journal that closes normally stops its writer without calling it a failure.
        expect(quietlyClosed).toEqual([])
      }),
    60_000
  )

  it.live("reads after an acknowledged write see it, from this thread's connection", () =>
    Effect.gen(function* () {
      const filename = join(dir, "reads.db")
      const scope = yield* Scope.make()
      const j = yield* SqliteJournal.make({ filename, writer: "worker" }).pipe(Scope.extend(scope))
      for (let i = 0; i < 20; i++) {
        const session = Records.makeSession({ id: sid(i), principal: "p", key: `k${i}` })
        yield* j.createSession(session)
        expect((yield* j.getSession(sid(i))).pipe((o) => o._tag)).toBe("Some")
        const stored = yield* j.append(sid(i), [delta(sid(i), 0), delta(sid(i), 1)])
        expect(yield* j.headSeq(sid(i))).toBe(2)
        expect((yield* j.readTape(sid(i), { afterSeq: 0 })).map((e) => e.tapeSeq)).toEqual(stored.map((e) => e.tapeSeq))
        yield* j.updateSession({ ...session, title: `t${i}` })
        expect((yield* j.getSession(sid(i))).pipe((o) => (o._tag === "Some" ? o.value.title : null))).toBe(`t${i}`)
      }
      yield* Scope.close(scope, Exit.void)
    })
  )
})

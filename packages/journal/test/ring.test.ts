/**
 * The shared-memory hand-off to the writer thread (`src/internal/ring.ts`): batches cross through a
 * `SharedArrayBuffer` ring, or by message when the ring is full or a batch is bigger than it, in one
 * order. Real worker, real SQLite file; the writer is held still where a test needs batches to pile
 * up by holding the file's write lock from a second connection on this thread.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Worker } from "node:worker_threads"
import { describe, expect, it } from "@effect/vitest"
import { Errors, Records, type TapeEvent } from "@palyra/core"
import Database from "better-sqlite3"
import { Deferred, Effect, Either, Exit, Fiber, Schedule, Scope } from "effect"
import { SqliteJournal } from "../src/index.js"
import { makeRingBuffer, ringReader, ringWriter } from "../src/internal/ring.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-ring-"))
type SessionId = TapeEvent.TapeEvent["sessionId"]
const sid = (i: number) => `01KA${String(i).padStart(22, "0")}` as SessionId
const message = (session: SessionId, text: string): TapeEvent.NewTapeEvent => ({
  _tag: "UserMessage",
  sessionId: session,
  runId: null,
  at: 1_700_000_000_000,
  text
})
const texts = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.map((e) => (e._tag === "UserMessage" ? e.text : `<${e._tag}>`))

/** A journal with a worker writer whose hand-offs are recorded, and a way to hold its write lock. */
const open = (name: string, ringBytes: number, busyTimeoutMs = 5000) =>
  Effect.gen(function* () {
    const filename = join(dir, `${name}.db`)
    const paths: Array<"ring" | "message"> = []
    const started = yield* Deferred.make<Worker>()
    const stopped: Array<string> = []
    const scope = yield* Scope.make()
    const journal = yield* SqliteJournal.make({
      filename,
      writer: "worker",
      writerRingBytes: ringBytes,
      busyTimeoutMs,
      onHandOff: (_, path) => paths.push(path),
      onWorker: (worker) => Deferred.unsafeDone(started, Exit.succeed(worker)),
      onWriterStopped: (reason) => stopped.push(reason)
    }).pipe(Scope.extend(scope))
    const worker = yield* Deferred.await(started)
    // A second connection on this thread: holding the file's write lock keeps the worker's next
    // commit waiting (in SQLite's busy handler, on its own thread) while this thread goes on.
    const lock = new Database(filename)
    const hold = () => void lock.exec("BEGIN IMMEDIATE")
    const release = () => {
      if (lock.inTransaction) lock.exec("COMMIT")
      lock.close()
    }
    return { filename, journal, paths, scope, worker, stopped, hold, release }
  })

/** Wait (polling with a real delay) until `n` batches were handed over. */
const handedOver = (paths: ReadonlyArray<unknown>, n: number) =>
  Effect.sync(() => paths.length >= n).pipe(
    Effect.repeat({ schedule: Schedule.spaced("2 millis"), until: (done) => done }),
    Effect.timeout("10 seconds"),
    Effect.orDie
  )

describe("the ring itself", () => {
  it("wraps around: entries of every size come out as they went in, past the end of the buffer many times", () => {
    const sab = makeRingBuffer(256)
    const writer = ringWriter(sab)
    const reader = ringReader(sab)
    let id = 0
    for (let round = 0; round < 200; round++) {
      // One to three entries in the ring at a time, of sizes that do not divide the capacity.
      const batch = Array.from({ length: 1 + (round % 3) }, (_, k) => ({
        header: `{"n":${round},"k":${k}}`,
        payloads: "é…x".repeat((round * 7 + k) % 9)
      }))
      const written = batch.filter((b) => writer.tryWrite(id, b.header, b.payloads) && ++id > 0)
      expect(written.length).toBeGreaterThan(0)
      for (const b of written) {
        const expected = id - written.length + written.indexOf(b)
        expect(reader.peek()).toBe(expected)
        expect(reader.take()).toEqual({ id: expected, ...b })
      }
      expect(reader.peek()).toBeUndefined()
    }
    expect(id).toBeGreaterThan(300)
  })

  it("refuses what does not fit (full, or bigger than the ring) without writing anything", () => {
    const sab = makeRingBuffer(128)
    const writer = ringWriter(sab)
    const reader = ringReader(sab)
    expect(writer.tryWrite(0, "h", "x".repeat(100))).toBe(false)
    expect(reader.peek()).toBeUndefined()
    expect(writer.tryWrite(0, "h", "x".repeat(20))).toBe(true)
    expect(writer.tryWrite(1, "h", "x".repeat(20))).toBe(true)
    expect(writer.tryWrite(2, "h", "x".repeat(20))).toBe(false)
    expect(reader.take()).toEqual({ id: 0, header: "h", payloads: "x".repeat(20) })
    expect(writer.tryWrite(2, "h", "y".repeat(20))).toBe(true)
    expect([reader.take().id, reader.take().id]).toEqual([1, 2])
    expect(reader.peek()).toBeUndefined()
  })
})

describe("the hand-off to the writer thread", () => {
  it.live("a small ring wraps around many times under concurrent appends: every event stored, in order, verified", () =>
    Effect.gen(function* () {
      const { journal, paths, release, scope } = yield* open("wrap", 4096)
      for (let s = 0; s < 3; s++) yield* journal.createSession(Records.makeSession({ id: sid(s), principal: "p" }))
      const text = (s: number, i: number) => `s${s} #${i} ${"ü…".repeat((i * 13 + s) % 40)}`
      yield* Effect.forEach(
        Array.from({ length: 3 }, (_, s) => s),
        (s) =>
          Effect.forEach(
            Array.from({ length: 80 }, (_, i) => i),
            (i) => journal.append(sid(s), [message(sid(s), text(s, i))]),
            { discard: true }
          ),
        { concurrency: "unbounded", discard: true }
      )
      // 240 appends (~150 KB as UTF-16) through a 4 KiB ring: it went round many times.
      expect(paths.filter((p) => p === "ring").length).toBeGreaterThan(60)
      for (let s = 0; s < 3; s++) {
        const tape = yield* journal.readTape(sid(s), { afterSeq: 0 })
        expect(tape.map((e) => e.tapeSeq)).toEqual(Array.from({ length: tape.length }, (_, i) => i + 1))
        expect(texts(tape).filter((t) => t.startsWith("s"))).toEqual(Array.from({ length: 80 }, (_, i) => text(s, i)))
      }
      expect((yield* journal.verify).ok).toBe(true)
      yield* Scope.close(scope, Exit.void)
      release()
    })
  )

  it.live(
    "a full ring falls back to messages, and an op bigger than the ring goes by message, interleaved in submission order",
    () =>
      Effect.gen(function* () {
        const { hold, journal, paths, release, scope } = yield* open("full", 4096)
        yield* journal.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
        const base = paths.length
        // The worker takes the first batch and waits for the lock; the next ones pile up (at most 8
        // batches are outstanding, the first included).
        hold()
        const sizes = [10, 100, 100, 2000, 100, 100, 1500, 10]
        const fibers: Array<Fiber.RuntimeFiber<ReadonlyArray<TapeEvent.TapeEvent>, unknown>> = []
        for (let i = 0; i < sizes.length; i++) {
          fibers.push(yield* Effect.fork(journal.append(sid(0), [message(sid(0), `${i}:${"ä".repeat(sizes[i]!)}`)])))
          // One append per batch: wait until this one was handed over.
          yield* handedOver(paths, base + i + 1)
        }
        // The 2,000-character op is bigger than the ring; the 1,500-character one fits an empty ring
        // but not what is left of this one (full: by message); the small one after it fits again.
        expect(paths.slice(base)).toEqual(["ring", "ring", "ring", "message", "ring", "ring", "message", "ring"])
        release()
        const stored = yield* Effect.forEach(fibers, Fiber.join)
        expect(stored.map((events) => events[0]!.tapeSeq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
        const tape = yield* journal.readTape(sid(0), { afterSeq: 0 })
        expect(texts(tape).map((t) => Number(t.split(":")[0]))).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
        expect((yield* journal.verify).ok).toBe(true)
        yield* Scope.close(scope, Exit.void)
      })
  )

  it.live("with every batch bigger than the ring, everything goes by message and commits in order", () =>
    Effect.gen(function* () {
      const { journal, paths, release, scope } = yield* open("big", 64)
      yield* journal.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
      const big = (i: number) => `${i} ${"x".repeat(500 + i)}`
      yield* Effect.forEach(
        Array.from({ length: 20 }, (_, i) => i),
        (i) => journal.append(sid(0), [message(sid(0), big(i))]),
        { concurrency: 4, discard: true }
      )
      expect(paths.every((p) => p === "message")).toBe(true)
      const tape = yield* journal.readTape(sid(0), { afterSeq: 0 })
      expect(texts(tape).sort()).toEqual(Array.from({ length: 20 }, (_, i) => big(i)).sort())
      expect(tape.map((e) => e.tapeSeq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
      yield* Scope.close(scope, Exit.void)
      release()
    })
  )

  it.live(
    "a worker that dies with batches in the ring fails them all, and every later write, with JournalError",
    () =>
      Effect.gen(function* () {
        // The worker's busy handler gives up after 200 ms: a terminated worker stops once it is back in JS.
        const { hold, journal, paths, release, scope, stopped, worker } = yield* open("dies", 1 << 16, 200)
        yield* journal.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
        const acked = yield* journal.append(sid(0), [message(sid(0), "acked")])
        const base = paths.length
        hold()
        const fibers: Array<Fiber.RuntimeFiber<ReadonlyArray<TapeEvent.TapeEvent>, unknown>> = []
        for (let i = 0; i < 5; i++) {
          fibers.push(yield* Effect.fork(journal.append(sid(0), [message(sid(0), `lost ${i}`)])))
          yield* handedOver(paths, base + i + 1)
        }
        // The first is in the worker (waiting for the lock), the rest in the ring.
        expect(paths.slice(base)).toEqual(["ring", "ring", "ring", "ring", "ring"])
        yield* Effect.promise(() => worker.terminate())
        release()
        const outcomes = yield* Effect.forEach(fibers, (f) => Effect.either(Fiber.join(f)))
        for (const o of outcomes) {
          expect(Either.isLeft(o)).toBe(true)
          if (Either.isLeft(o)) expect(o.left).toBeInstanceOf(Errors.JournalError)
        }
        expect(yield* Effect.flip(journal.append(sid(0), [message(sid(0), "later")]))).toBeInstanceOf(
          Errors.JournalError
        )
        expect(stopped).toHaveLength(1)
        yield* Scope.close(scope, Exit.void)
        // What was acknowledged is there; the chains verify.
        const reopened = yield* Scope.make()
        const again = yield* SqliteJournal.make({ filename: join(dir, "dies.db") }).pipe(Scope.extend(reopened))
        const tape = yield* again.readTape(sid(0), { afterSeq: 0 })
        expect(tape.map((e) => e.tapeSeq).slice(0, 1)).toEqual(acked.map((e) => e.tapeSeq))
        expect((yield* again.verify).ok).toBe(true)
        yield* Scope.close(reopened, Exit.void)
      }),
    30_000
  )

  it.live("close with batches in the ring commits them all before the worker stops", () =>
    Effect.gen(function* () {
      const { filename, hold, journal, paths, release, scope, stopped } = yield* open("close", 1 << 16)
      yield* journal.createSession(Records.makeSession({ id: sid(0), principal: "p" }))
      const base = paths.length
      hold()
      const fibers: Array<Fiber.RuntimeFiber<ReadonlyArray<TapeEvent.TapeEvent>, unknown>> = []
      for (let i = 0; i < 6; i++) {
        fibers.push(yield* Effect.fork(journal.append(sid(0), [message(sid(0), `pending ${i}`)])))
        yield* handedOver(paths, base + i + 1)
      }
      expect(paths.slice(base).every((p) => p === "ring")).toBe(true)
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      release()
      yield* Fiber.join(closing)
      const stored = yield* Effect.forEach(fibers, Fiber.join)
      expect(stored.map((events) => events[0]!.tapeSeq)).toEqual([1, 2, 3, 4, 5, 6])
      expect(stopped).toEqual([])
      const reopened = yield* Scope.make()
      const again = yield* SqliteJournal.make({ filename }).pipe(Scope.extend(reopened))
      expect(texts(yield* again.readTape(sid(0), { afterSeq: 0 }))).toEqual(
        Array.from({ length: 6 }, (_, i) => `pending ${i}`)
      )
      expect((yield* again.verify).ok).toBe(true)
      yield* Scope.close(reopened, Exit.void)
    })
  )
})

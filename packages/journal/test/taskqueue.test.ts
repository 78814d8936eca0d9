import { spawn } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "@effect/vitest"
import { TaskQueue } from "@palyra/core/memory"
import Database from "better-sqlite3"
import { Effect, Either, Option, Schedule, type Scope, TestClock } from "effect"
import { SqliteTaskQueue } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-tasks-"))
let files = 0
const fresh = () => join(dir, `queue-${files++}.db`)

const adapters: ReadonlyArray<readonly [string, () => Effect.Effect<TaskQueue.Service, unknown, Scope.Scope>]> = [
  ["memory", () => TaskQueue.makeMemory()],
  ["sqlite", () => SqliteTaskQueue.make({ filename: fresh() })]
]

const some = <A>(o: Option.Option<A>): A => {
  assert.isTrue(Option.isSome(o), "expected a task")
  return (o as Option.Some<A>).value
}

/** Let forked fibers run after the TestClock moved. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

for (const [name, open] of adapters) {
  describe(`TaskQueue (${name})`, () => {
    it.scoped("claims by priority, then not-before, then age; a dedupe key enqueues once; payloads are redacted", () =>
      Effect.gen(function* () {
        const q = yield* open()
        const low = yield* q.enqueue({ kind: "k", payload: { n: 1 } })
        const high = yield* q.enqueue({ kind: "k", payload: { n: 2 }, priority: 10 })
        const later = yield* q.enqueue({ kind: "k", priority: 50, delay: "1 minute" })
        const again = yield* q.enqueue({
          kind: "k",
          dedupeKey: "once",
          payload: { api_key: "sk-abcdefghijklmnop1234" }
        })
        const dup = yield* q.enqueue({ kind: "k", dedupeKey: "once", payload: { other: true } })
        assert.strictEqual(dup.id, again.id)
        assert.deepStrictEqual(again.payload, { api_key: "[REDACTED:apikey]" })
        const order: Array<string> = []
        for (let i = 0; i < 3; i++) order.push(some(yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" })).id)
        assert.deepStrictEqual(order, [high.id, low.id, again.id])
        assert.isTrue(Option.isNone(yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" })))
        assert.isTrue(Option.isNone(yield* q.claim({ kind: "other", owner: "w", lease: "1 minute" })))
        yield* TestClock.adjust("1 minute")
        assert.strictEqual(some(yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" })).id, later.id)
        const refused = yield* Effect.flip(q.enqueue({ kind: "bad kind!" }))
        assert.strictEqual(refused._tag, "InvalidArgument")
        const tooBig = yield* Effect.flip(q.enqueue({ kind: "k", payload: "x".repeat(70_000) }))
        assert.strictEqual(tooBig._tag, "PayloadTooLarge")
      })
    )

    it.scoped("a failed attempt is retried after an exponential backoff; a permanent failure ends the task", () =>
      Effect.gen(function* () {
        const q = yield* open()
        const t = yield* q.enqueue({ kind: "k", backoffBase: "10 seconds", maxAttempts: 3 })
        const claim = q.claim({ kind: "k", owner: "w", lease: "1 minute" })
        yield* claim
        const retried = yield* q.fail(t.id, "w", { message: "flaky", retryable: true })
        assert.strictEqual(retried.state, "queued")
        assert.strictEqual(retried.notBefore, 10_000)
        assert.isTrue(Option.isNone(yield* claim))
        yield* TestClock.adjust("10 seconds")
        assert.strictEqual(some(yield* claim).attempts, 2)
        const second = yield* q.fail(t.id, "w", { message: "flaky", retryable: true })
        assert.strictEqual(second.notBefore, 10_000 + 20_000) // doubled
        yield* TestClock.adjust("20 seconds")
        yield* claim
        const last = yield* q.fail(t.id, "w", { message: "still flaky", retryable: true })
        assert.strictEqual(last.state, "failed") // no attempt left
        const p = yield* q.enqueue({ kind: "k" })
        yield* claim
        assert.strictEqual((yield* q.fail(p.id, "w", { message: "bad input", retryable: false })).state, "failed")
        const log = yield* q.log(t.id)
        assert.deepStrictEqual(
          log.map((e) => e.event),
          ["enqueued", "claimed", "retry_scheduled", "claimed", "retry_scheduled", "claimed", "failed"]
        )
      })
    )

    it.scoped("a task past its expiry ends expired, whether queued or running; a late completion is refused", () =>
      Effect.gen(function* () {
        const q = yield* open()
        const waiting = yield* q.enqueue({ kind: "k", delay: "5 minutes", ttl: "1 minute" })
        const running = yield* q.enqueue({ kind: "r", ttl: "1 minute" })
        yield* q.claim({ kind: "r", owner: "w", lease: "10 minutes" })
        yield* TestClock.adjust("61 seconds")
        assert.isTrue(Option.isNone(yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" })))
        assert.strictEqual(some(yield* q.get(waiting.id)).state, "expired")
        const swept = yield* q.sweep("test")
        assert.deepStrictEqual(
          swept.map((t) => [t.id, t.state]),
          [[running.id, "expired"]]
        )
        const late = yield* Effect.flip(q.complete(running.id, "w"))
        assert.strictEqual(late._tag, "Conflict")
        assert.strictEqual(some(yield* q.get(running.id)).state, "expired")
        assert.deepStrictEqual(
          (yield* q.log(running.id)).map((e) => e.event),
          ["enqueued", "claimed", "expired"]
        )
      })
    )

    it.scoped(
      "a lost lease: the task is reclaimed with the attempt counted, and the old owner can no longer finish it",
      () =>
        Effect.gen(function* () {
          const q = yield* open()
          const t = yield* q.enqueue({ kind: "k", maxAttempts: 2 })
          yield* q.claim({ kind: "k", owner: "dead", lease: "30 seconds" })
          yield* TestClock.adjust("20 seconds")
          yield* q.heartbeat(t.id, "dead", "30 seconds") // kept: expires at 50 s now
          yield* TestClock.adjust("29 seconds")
          assert.deepStrictEqual(yield* q.expiredLeases, [])
          yield* TestClock.adjust("2 seconds")
          assert.deepStrictEqual(
            (yield* q.expiredLeases).map((x) => x.id),
            [t.id]
          )
          const second = some(yield* q.claim({ kind: "k", owner: "alive", lease: "30 seconds" }))
          assert.strictEqual(second.attempts, 2)
          assert.strictEqual((yield* Effect.flip(q.complete(t.id, "dead")))._tag, "Conflict")
          assert.strictEqual((yield* Effect.flip(q.heartbeat(t.id, "dead", "30 seconds")))._tag, "Conflict")
          yield* TestClock.adjust("31 seconds") // the second owner dies too: no attempt left
          const [failed] = yield* q.sweep("watchdog")
          assert.strictEqual(failed?.state, "failed")
          assert.deepStrictEqual(
            (yield* q.log(t.id)).map((e) => [e.event, e.owner]),
            [
              ["enqueued", null],
              ["claimed", "dead"],
              ["lease_lost", "dead"],
              ["requeued", "alive"],
              ["claimed", "alive"],
              ["lease_lost", "alive"],
              ["failed", "watchdog"]
            ]
          )
        })
    )

    it.scoped(
      "the worker runs at most `concurrency` tasks of a kind at once and retries failures after the backoff",
      () =>
        Effect.gen(function* () {
          const q = yield* open()
          let running = 0
          let peak = 0
          const done: Array<unknown> = []
          let flaky = 0
          for (let i = 0; i < 5; i++) yield* q.enqueue({ kind: "slow", payload: i })
          const retry = yield* q.enqueue({ kind: "flaky", backoffBase: "5 seconds" })
          yield* TaskQueue.worker({
            owner: "w1",
            concurrency: { slow: 2 },
            pollInterval: "1 second",
            lease: "1 minute",
            handlers: {
              slow: (task) =>
                Effect.gen(function* () {
                  running++
                  peak = Math.max(peak, running)
                  yield* Effect.sleep("10 seconds")
                  running--
                  done.push(task.payload)
                }),
              flaky: () => (flaky++ === 0 ? Effect.fail(new Error("first try fails")) : Effect.void)
            }
          }).pipe(Effect.provideService(TaskQueue.TaskQueue, q))
          for (let i = 0; i < 40; i++) {
            yield* TestClock.adjust("1 second")
            yield* settle
          }
          assert.strictEqual(peak, 2)
          assert.deepStrictEqual([...done].sort(), [0, 1, 2, 3, 4])
          assert.strictEqual((yield* q.list({ kind: "slow", states: ["succeeded"] })).length, 5)
          const r = some(yield* q.get(retry.id))
          assert.strictEqual(r.state, "succeeded")
          assert.strictEqual(r.attempts, 2)
          assert.deepStrictEqual(
            (yield* q.log(retry.id)).map((e) => e.event),
            ["enqueued", "claimed", "retry_scheduled", "claimed", "succeeded"]
          )
        })
    )

    it.scoped("cancelling a running task stops its handler at the next heartbeat; nothing completes it", () =>
      Effect.gen(function* () {
        const q = yield* open()
        let interrupted = false
        let started = false
        const t = yield* q.enqueue({ kind: "long" })
        yield* TaskQueue.worker({
          owner: "w",
          lease: "30 seconds",
          heartbeatEvery: "10 seconds",
          pollInterval: "1 second",
          handlers: {
            long: () =>
              Effect.sync(() => {
                started = true
              }).pipe(
                Effect.zipRight(Effect.never),
                Effect.onInterrupt(() =>
                  Effect.sync(() => {
                    interrupted = true
                  })
                )
              )
          }
        }).pipe(Effect.provideService(TaskQueue.TaskQueue, q))
        yield* TestClock.adjust("1 second")
        yield* settle
        assert.isTrue(started)
        yield* q.cancel(t.id, "operator")
        yield* TestClock.adjust("10 seconds")
        yield* settle
        assert.isTrue(interrupted)
        const final = some(yield* q.get(t.id))
        assert.strictEqual(final.state, "cancelled")
        assert.deepStrictEqual(
          (yield* q.log(t.id)).map((e) => e.event),
          ["enqueued", "claimed", "cancelled"]
        )
      })
    )
  })
}

describe("SqliteTaskQueue", () => {
  it.scoped("payloads reach the file redacted", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const q = yield* SqliteTaskQueue.make({ filename })
      yield* q.enqueue({ kind: "k", payload: { note: "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345" } })
      const db = new Database(filename, { readonly: true })
      const raw = db.prepare("SELECT payload FROM tasks").all() as Array<{ payload: string }>
      db.close()
      assert.strictEqual(raw.length, 1)
      assert.notInclude(raw[0]!.payload, "abcdefghijklmnopqrstuvwxyz012345")
    })
  )

  it.live(
    "a worker SIGKILLed while holding the lease: the task is retried after the lease expires and completes exactly once",
    () =>
      Effect.gen(function* () {
        const filename = fresh()
        const fixture = fileURLToPath(new URL("./fixtures/task-worker.ts", import.meta.url))
        const id = yield* Effect.scoped(
          Effect.flatMap(SqliteTaskQueue.make({ filename }), (q) =>
            Effect.map(q.enqueue({ kind: "job", payload: { n: 1 } }), (t) => t.id)
          )
        )
        // The child claims the task, heartbeats once, and kills itself with the lease held.
        const output = yield* Effect.async<string, Error>((resume) => {
          const child = spawn(
            process.execPath,
            ["--conditions=@palyra/source", "--import", "tsx", fixture, filename, "child-worker"],
            { stdio: ["ignore", "pipe", "pipe"] }
          )
          let out = ""
          let err = ""
          child.stdout!.on("data", (d) => (out += d))
          child.stderr!.on("data", (d) => (err += d))
          child.on("exit", (code, signal) =>
            resume(
              signal === "SIGKILL"
                ? Effect.succeed(out)
                : Effect.fail(new Error(`the worker exited with ${signal ?? code}: ${err}`))
            )
          )
          return Effect.sync(() => child.kill("SIGKILL"))
        })
        assert.include(output, `claimed ${id} attempt 1`)
        assert.include(output, "heartbeat")

        const ran: Array<string> = []
        yield* Effect.scoped(
          Effect.gen(function* () {
            const q = yield* SqliteTaskQueue.make({ filename })
            const held = some(yield* q.get(id))
            assert.strictEqual(held.state, "running")
            assert.strictEqual(held.leaseOwner, "child-worker")
            assert.isNotNull(held.heartbeatAt)
            yield* TaskQueue.worker({
              owner: "parent-worker",
              lease: "1 second",
              pollInterval: "50 millis",
              handlers: { job: (task) => Effect.sync(() => ran.push(task.id)) }
            }).pipe(Effect.provideService(TaskQueue.TaskQueue, q))
            const done = yield* q.get(id).pipe(
              Effect.map(some),
              Effect.filterOrFail((t) => t.state === "succeeded"),
              Effect.retry(Schedule.spaced("50 millis")),
              Effect.timeout("10 seconds")
            )
            assert.strictEqual(done.attempts, 2)
            // The dead worker's lease is gone for good: it could never complete the task now.
            assert.strictEqual((yield* Effect.flip(q.complete(id, "child-worker")))._tag, "Conflict")
            const log = yield* q.log(id)
            assert.deepStrictEqual(
              log.map((e) => [e.event, e.owner, e.attempt]),
              [
                ["enqueued", null, 0],
                ["claimed", "child-worker", 1],
                ["lease_lost", "child-worker", 1],
                ["requeued", "parent-worker", 1],
                ["claimed", "parent-worker", 2],
                ["succeeded", "parent-worker", 2]
              ]
            )
          })
        )
        assert.deepStrictEqual(ran, [id])
      }),
    { timeout: 30_000 }
  )

  it.scoped("two queues on one file: a claim is taken by exactly one of them", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const a = yield* SqliteTaskQueue.make({ filename })
      const b = yield* SqliteTaskQueue.make({ filename })
      for (let i = 0; i < 20; i++) yield* a.enqueue({ kind: "k", payload: i })
      const claims = yield* Effect.all(
        Array.from({ length: 30 }, (_, i) =>
          (i % 2 === 0 ? a : b).claim({ kind: "k", owner: `w${i}`, lease: "1 minute" })
        ),
        { concurrency: "unbounded" }
      )
      const ids = claims.filter(Option.isSome).map((c) => c.value.id)
      assert.strictEqual(ids.length, 20)
      assert.strictEqual(new Set(ids).size, 20)
    })
  )

  it.scopedLive("polling an empty queue takes no write lock; a task queued meanwhile is claimed under it", () =>
    Effect.gen(function* () {
      const filename = fresh()
      const q = yield* SqliteTaskQueue.make({ filename, busyTimeoutMs: 200 })
      // Another connection (the journal's writer, say) holds the write lock.
      const other = new Database(filename)
      other.pragma("busy_timeout = 0")
      other.exec("BEGIN IMMEDIATE")
      const idle = yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" }).pipe(Effect.either)
      assert.deepStrictEqual(idle, Either.right(Option.none()))
      other.exec("COMMIT")
      const task = yield* q.enqueue({ kind: "k", payload: 1 })
      other.exec("BEGIN IMMEDIATE")
      // Something to claim: the claim waits for the lock (here: in vain, a typed busy failure).
      const blocked = yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" }).pipe(Effect.either)
      assert.isTrue(Either.isLeft(blocked))
      other.exec("COMMIT")
      other.close()
      assert.strictEqual(some(yield* q.claim({ kind: "k", owner: "w", lease: "1 minute" })).id, task.id)
    })
  )
})

/**
 * A run's end-of-run work waits for the event loop's check phase after its end commit: the commit's
 * publication writes the run's last events to its streams (an HTTP/2 session sends them from a
 * native immediate at the start of that phase), and the run's end — its record read for waiters,
 * its after-run hooks' fiber — runs after that, not in the same macrotask ahead of the send
 * (`afterSend`), for a run claimed at its admission and for runs queued behind another alike.
 * (The hooks' quick verdict is not deferred: it runs before the session's next run starts.)
 * The signal is deterministic: a `setImmediate` queued when the end was committed has run (or not)
 * by the time the hook's `onRunEnd` runs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schedule } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, type RunHooks, ScriptedModel } from "../src/index.js"
import { gatewayLayer, markingRunEndCheckPhase } from "../src/testing.js"

const alice = Caller.user("alice")

/** Polls `read` (a real delay between reads) until it holds `n` items. */
const until = (read: () => number, n: number) =>
  Effect.sync(read).pipe(
    Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (m) => m >= n }),
    Effect.timeout("5 seconds")
  )

describe("a run's end-of-run work", () => {
  it.live(
    "runs after the check phase that follows its end commit (the end's frames are sent first), claimed or queued",
    () =>
      Effect.gen(function* () {
        // Per run id: whether the check phase after its end commit had come when its hook ran.
        const { journal, checkPassed } = markingRunEndCheckPhase(yield* MemoryJournal.make())
        const seen: Array<[string, boolean | undefined]> = []
        const hook: RunHooks.Service = {
          onRunEnd: (end) => Effect.sync(() => seen.push([end.run.id, checkPassed.get(end.run.id)]))
        }
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const runs: Array<string> = []
          // Three sessions (each run claimed at its admission), then three runs on one session (the
          // second and third queued behind the first, run by its worker).
          for (const key of ["a", "b", "c", "d", "d", "d"]) {
            const { run } = yield* gateway.sendMessage(alice, { key, text: "hello" })
            runs.push(run.id)
          }
          yield* until(() => seen.length, 6)
          assert.sameMembers(
            seen.map(([id]) => id),
            runs
          )
          for (const [id, passed] of seen)
            assert.strictEqual(passed, true, `run ${id}'s hook ran before the check phase`)
        }).pipe(
          Effect.provide(
            gatewayLayer({
              model: ScriptedModel.make(() => ({ text: ["one ", "two"] })),
              tools: [],
              runHooks: hook,
              journal: Layer.succeed(Journal.Journal, journal)
            })
          ),
          Effect.scoped
        )
      })
  )
})

/**
 * The tape's plain append resumes its writers after what their commits' publications started: one
 * journal answer commits many sessions' appends; each publication wakes that session's followers,
 * whose transport writes in a microtask (gRPC's `RunStream`) — and an HTTP/2 frame leaves only after
 * the macrotask that wrote it. So every follower's write of the answer's events runs before any
 * woken writer's next step (which would otherwise hold the frames in the same macrotask), while the
 * commits, publications and lock hand-offs still happen in the answer itself.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { Journal, MemoryJournal, Records, type TapeEvent } from "../src/index.js"
import { makeTape } from "../src/kernel/internal/tape.js"

const SESSIONS = ["01KA0000000000000000000SE1", "01KA0000000000000000000SE2", "01KA0000000000000000000SE3"] as never[]
const RUN = "01KA0000000000000000000RUN" as never

const delta = (sessionId: string, text: string) =>
  ({ _tag: "TextDelta", sessionId, runId: RUN, at: 1, text }) as unknown as TapeEvent.NewTapeEvent

/** A memory journal with a plain append whose commits are held until `answer` answers them all in one loop (as the writer thread's answer does). */
const heldJournal = Effect.gen(function* () {
  const inner = yield* MemoryJournal.make()
  for (const id of SESSIONS) yield* inner.createSession(Records.makeSession({ id, principal: "alice" }))
  const held: Array<() => void> = []
  const appendNow: Journal.AppendNow = (sessionId, events, effects, done) =>
    Effect.runCallback(inner.append(sessionId, events, effects), { onExit: (exit) => held.push(() => done(exit)) })
  const journal: Journal.Service = { ...inner, append: Journal.withAppendNow(inner.append, appendNow) }
  const answer = () => {
    for (const f of held.splice(0)) f()
  }
  return { journal, held, answer }
})

/** Yield to the scheduler until `cond` holds (a real delay per round, bounded). */
const until = (cond: () => boolean) =>
  Effect.gen(function* () {
    for (let i = 0; i < 500 && !cond(); i++) yield* Effect.sleep("2 millis")
    assert.isTrue(cond())
  })

describe("Tape over Journal.appendNow: writers resume after the publications' writes", () => {
  it.live("every follower's microtask write of one answer's commits runs before any writer resumes", () =>
    Effect.gen(function* () {
      const { journal, held, answer } = yield* heldJournal
      const tape = yield* makeTape(journal)
      const log: Array<string> = []
      // One live follower per session, writing in a microtask when woken (as `runStreamWire` does).
      const followers = SESSIONS.map((id, i) => {
        const f = tape.attachLive(id, 0, {})
        const arm = () =>
          f.onReady(() =>
            queueMicrotask(() => {
              const taken = f.take()
              if (Array.isArray(taken)) log.push(`written ${i}:${taken.map((e) => e.tapeSeq).join(",")}`)
              arm()
            })
          )
        arm()
        return f
      })
      const writers = yield* Effect.forEach(
        SESSIONS,
        (id, i) =>
          Effect.fork(
            Effect.uninterruptible(tape.append(id, [delta(id, `d${i}`)])).pipe(
              Effect.tap((stored) => Effect.sync(() => log.push(`resumed ${i}:${stored[0]!.tapeSeq}`)))
            )
          ),
        { discard: false }
      )
      yield* until(() => held.length === SESSIONS.length)
      assert.deepStrictEqual(log, [])
      // The writer thread's answer: all three commits answered in one synchronous loop.
      answer()
      for (const w of writers) assert.isTrue(Exit.isSuccess(yield* Fiber.await(w)))
      assert.deepStrictEqual(log.slice(0, 3).sort(), ["written 0:1", "written 1:1", "written 2:1"])
      assert.deepStrictEqual(log.slice(3).sort(), ["resumed 0:1", "resumed 1:1", "resumed 2:1"])
      for (const f of followers) f.close()
    })
  )

  it.live("a writer's next append goes out after the resume, in order; a failed commit still resumes its writer", () =>
    Effect.gen(function* () {
      const { journal, held, answer } = yield* heldJournal
      const tape = yield* makeTape(journal)
      const id = SESSIONS[0]!
      const fiber = yield* Effect.fork(
        Effect.forEach([1, 2, 3], (n) => Effect.uninterruptible(tape.append(id, [delta(id, `d${n}`)])))
      )
      for (let n = 1; n <= 3; n++) {
        yield* until(() => held.length === 1)
        answer()
      }
      const stored = (yield* Fiber.join(fiber)).flat()
      assert.deepStrictEqual(
        stored.map((e) => e.tapeSeq),
        [1, 2, 3]
      )
      // A write refused at once (the session does not exist) is answered typed, through the same resume.
      const missing = "01KA0000000000000000000NOS" as never
      const refused = yield* Effect.fork(Effect.either(tape.append(missing, [delta(missing, "x")])))
      yield* until(() => held.length === 1)
      answer()
      const result = yield* Fiber.join(refused)
      assert.isTrue(result._tag === "Left")
    })
  )
})

import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import * as fc from "fast-check"
import { RunState } from "../src/index.js"

const terminal = new Set(["Done", "Cancelled", "Failed"])

describe("RunState", () => {
  it("follows the documented happy path", () => {
    let s: RunState.RunState = "Pending"
    for (const t of ["Accept", "Start", "AwaitApproval", "ApprovalResolved", "Complete"] as const) {
      s = Either.getOrThrow(RunState.transition(s, t))
    }
    assert.strictEqual(s, "Done")
  })

  it("refuses an invalid transition with a typed error", () => {
    const r = RunState.transition("Pending", "Complete")
    assert.isTrue(Either.isLeft(r))
    if (Either.isLeft(r)) {
      assert.strictEqual(r.left._tag, "InvalidTransition")
      assert.strictEqual(r.left.code, "invalid_transition")
    }
  })

  it("never leaves the defined states; terminal states stay terminal; Cancel/Fail legal from any live state", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...RunState.transitions), { maxLength: 40 }), (events) => {
        let s: RunState.RunState = "Pending"
        for (const t of events) {
          const r = RunState.transition(s, t)
          if (terminal.has(s)) {
            if (Either.isRight(r)) return false
            continue
          }
          if ((t === "Cancel" || t === "Fail") && Either.isLeft(r)) return false
          if (Either.isRight(r)) {
            if (!RunState.states.includes(r.right)) return false
            s = r.right
          }
        }
        return RunState.states.includes(s)
      }),
      { numRuns: 2000 }
    )
  })
})

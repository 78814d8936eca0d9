/**
 * An engine on the built-in policies installs them with Cedar on its first use, not when it is
 * built, so a daemon on the built-ins loads cedar-wasm at its first tool call instead of at start.
 * This file runs in its own process (vitest isolates files), so nothing has loaded cedar-wasm
 * before its first test.
 */
import { createRequire } from "node:module"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import type { Ids, PolicyEngine } from "../src/index.js"
import { standingGrant } from "./fixtures/grant.js"

const request = (
  tool: string,
  risk: "low" | "sensitive" | "critical",
  extra: Partial<PolicyEngine.PolicyRequest> = {}
): PolicyEngine.PolicyRequest => ({
  principal: "alice",
  sessionId: "01KA0000000000000000000SES" as Ids.SessionId,
  channel: null,
  tool: { name: tool, risk, category: "test" },
  args: {},
  argsDigest: "d",
  ...extra
})

const grant = standingGrant

/** Whether cedar-wasm's CommonJS module has been loaded in this process (imported or required). */
const wasmLoaded = () => Object.keys(createRequire(import.meta.url).cache).some((file) => file.includes("cedar-wasm"))

describe("Cedar engine on the built-in policies: installed on first use", () => {
  it.effect(
    "building it and an empty set of grants load nothing; the first decision does, as an eager engine decides",
    () =>
      Effect.gen(function* () {
        assert.isFalse(wasmLoaded(), "nothing in this process loaded cedar-wasm yet")
        const lazy = yield* CedarPolicy.make()
        yield* lazy.setGrants([]) // what the Gateway does at start when there are no standing grants
        assert.isFalse(wasmLoaded(), "not loaded by make nor by an empty set of grants")
        const sets = CedarPolicy.preparedSetCount()
        // The same policies in a text that is not the built-ins' exact one: validated and installed at make.
        const eager = yield* CedarPolicy.make({ policies: `${CedarPolicy.defaultPolicies}\n// a copy\n` })
        assert.isTrue(wasmLoaded())
        assert.strictEqual(CedarPolicy.preparedSetCount(), sets + 2, "one set per action")
        for (const [tool, risk] of [
          ["time.now", "low"],
          ["fs.write", "sensitive"],
          ["disk.wipe", "critical"]
        ] as const) {
          assert.deepStrictEqual(yield* lazy.decide(request(tool, risk)), yield* eager.decide(request(tool, risk)))
        }
        assert.strictEqual(CedarPolicy.preparedSetCount(), sets + 4, "the first decision installed the built-ins")
        assert.strictEqual(yield* lazy.version, 1)
      })
  )

  it.effect("a grant, a reload or a version read before any decision installs the built-ins first", () =>
    Effect.gen(function* () {
      const granted = yield* CedarPolicy.make()
      yield* granted.setGrants([grant("01KA0000000000000000000APP")])
      assert.strictEqual(yield* granted.version, 2, "the built-ins (1), then the grant (2), as an eager engine")
      const allowed = yield* granted.decide(request("shell.exec", "sensitive"))
      assert.deepStrictEqual(allowed.policyIds, ["grant:01KA0000000000000000000APP"])
      assert.strictEqual((yield* granted.decide(request("time.now", "low"))).decision, "allow")
      const reloaded = yield* CedarPolicy.make()
      assert.strictEqual(yield* reloaded.reload(`permit (principal, action, resource);`), 2)
      assert.strictEqual((yield* reloaded.decide(request("disk.wipe", "critical"))).decision, "allow")
      const read = yield* CedarPolicy.make()
      assert.strictEqual(yield* read.version, 1)
      assert.strictEqual((yield* read.decide(request("disk.wipe", "critical"))).decision, "deny")
    })
  )
})

/**
 * bench/loop/cedar.ts: CPU per policy decision of the Cedar engine, the same request again vs a new
 * argument digest each time (a tool called with new args), with the built-in policies and with one
 * policy that reads `context.argsDigest` (then every new digest is a Cedar call):
 * `node --conditions=@palyra/source --import tsx bench/loop/cedar.ts`.
 */
import { CedarPolicy } from "@palyra/core/cedar"
import { Effect } from "effect"

const readsArgs = `${CedarPolicy.defaultPolicies}
forbid (principal, action, resource) when { context.argsDigest == "never" };`

const main = Effect.gen(function* () {
  for (const [policies, label] of [
    [CedarPolicy.defaultPolicies, "built-in policies"],
    [readsArgs, "a policy reads argsDigest"]
  ] as const) {
    const engine = yield* CedarPolicy.make({ policies })
    const request = (digest: string, risk: "low" | "high") =>
      ({
        principal: "alice",
        sessionId: "s1",
        channel: "cli",
        agent: "default",
        tool: { name: "time.now", risk, category: "read" },
        args: {},
        argsDigest: digest
      }) as never
    for (const risk of ["low", "high"] as const) {
      for (const vary of [false, true]) {
        const n = 3000
        yield* engine.decide(request("warm", risk))
        const c0 = process.cpuUsage()
        for (let i = 0; i < n; i++) yield* engine.decide(request(vary ? `${risk}${i}` : "same", risk))
        const c = process.cpuUsage(c0)
        const us = ((c.user + c.system) / n).toFixed(1)
        console.log(`${label}, ${risk} risk, ${vary ? "new args each call" : "same args"}: ${us} µs/decision`)
      }
    }
  }
})
void Effect.runPromise(main)

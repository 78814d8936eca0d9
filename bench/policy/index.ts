/**
 * bench/policy: Cedar decisions for a 50-policy set with entity attributes and a context record.
 *
 * - naive: the policy text is parsed on every call (`isAuthorized` with the text);
 * - prepared: Palyra's engine with its cache off (policies pre-parsed once; one decision may take two
 *   Cedar calls: execute, then request_approval);
 * - cached: the same engine with its exact decision cache on (repeated identical requests).
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { CedarPolicy } from "@palyra/core/cedar"
import { Effect } from "effect"
import { percentile, quick, result, round, table } from "../lib/report.js"

const policies = [
  CedarPolicy.defaultPolicies,
  ...Array.from(
    { length: 47 },
    (_, i) => `@id("team.rule-${i}")
permit (principal == Palyra::Principal::"user-${i}", action == Palyra::Action::"tool.execute", resource is Palyra::Tool)
when { resource.category == "cat-${i % 7}" && context.channel != "blocked" && context.session like "01*" };`
  )
].join("\n\n")

const requestFor = (i: number) => ({
  principal: `user-${i % 50}`,
  sessionId: `01KA${String(i % 20).padStart(22, "0")}` as never,
  channel: i % 3 === 0 ? "slack" : "cli",
  tool: { name: `tool-${i % 30}`, risk: (["low", "sensitive", "critical"] as const)[i % 3]!, category: `cat-${i % 7}` },
  args: {},
  argsDigest: `digest-${i % 10}`
})

const measure = (n: number, f: (i: number) => void) => {
  const times: Array<number> = []
  for (let i = 0; i < Math.min(200, n); i++) f(i) // warm-up
  const start = performance.now()
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    f(i)
    times.push((performance.now() - t) * 1000)
  }
  const elapsed = performance.now() - start
  times.sort((a, b) => a - b)
  return { p50: percentile(times, 50), p99: percentile(times, 99), perSec: n / (elapsed / 1000) }
}

const main = async () => {
  const n = quick ? 300 : 5000
  const naive = measure(Math.min(n, quick ? 100 : 1000), (i) => {
    const r = requestFor(i)
    const answer = cedar.isAuthorized({
      principal: { type: "Palyra::Principal", id: r.principal },
      action: { type: "Palyra::Action", id: "tool.execute" },
      resource: { type: "Palyra::Tool", id: r.tool.name },
      context: { session: r.sessionId, channel: r.channel, argsDigest: r.argsDigest, now: Date.now() },
      policies: { staticPolicies: policies },
      entities: [
        {
          uid: { type: "Palyra::Tool", id: r.tool.name },
          attrs: { risk: r.tool.risk, category: r.tool.category },
          parents: []
        }
      ]
    })
    if (answer.type !== "success") throw new Error("naive call failed")
  })
  const prepared = await Effect.runPromise(CedarPolicy.make({ policies, cacheSize: 0 }))
  const preparedM = measure(n, (i) => {
    Effect.runSync(prepared.decide(requestFor(i)))
  })
  const cached = await Effect.runPromise(CedarPolicy.make({ policies }))
  for (let i = 0; i < 400; i++) Effect.runSync(cached.decide(requestFor(i))) // fill: requests repeat every 300
  const cachedM = measure(n, (i) => {
    Effect.runSync(cached.decide(requestFor(i)))
  })
  // The floor: one trivial policy, no entities, an empty-ish context: what any call across the wasm boundary costs.
  cedar.preparsePolicySet("floor", { staticPolicies: "permit (principal, action, resource);" })
  const floor = measure(n, () => {
    cedar.statefulIsAuthorized({
      principal: { type: "P", id: "a" },
      action: { type: "A", id: "x" },
      resource: { type: "R", id: "r" },
      context: {},
      preparsedPolicySetId: "floor",
      entities: []
    })
  })
  // One call, the default 3 policies, the same realistic request (context record + tool entity):
  // what marshalling a real request across the boundary costs before any policy is evaluated.
  cedar.preparsePolicySet("small", { staticPolicies: CedarPolicy.defaultPolicies })
  const small = measure(n, (i) => {
    const r = requestFor(i)
    cedar.statefulIsAuthorized({
      principal: { type: "Palyra::Principal", id: r.principal },
      action: { type: "Palyra::Action", id: "tool.execute" },
      resource: { type: "Palyra::Tool", id: r.tool.name },
      context: { session: r.sessionId, channel: r.channel, argsDigest: r.argsDigest, now: 1 },
      preparsedPolicySetId: "small",
      entities: [
        {
          uid: { type: "Palyra::Tool", id: r.tool.name },
          attrs: { risk: r.tool.risk, category: r.tool.category },
          parents: []
        }
      ]
    })
  })
  table("Cedar decisions, 50 policies (µs per decision)", [
    {
      mode: "one call, 3 policies, realistic request",
      p50: round(small.p50),
      p99: round(small.p99),
      "decisions/s": Math.round(small.perSec)
    },
    {
      mode: "floor: 1 trivial policy, one call",
      p50: round(floor.p50),
      p99: round(floor.p99),
      "decisions/s": Math.round(floor.perSec)
    },
    {
      mode: "naive (parse per call)",
      p50: round(naive.p50),
      p99: round(naive.p99),
      "decisions/s": Math.round(naive.perSec)
    },
    {
      mode: "prepared (engine, no cache)",
      p50: round(preparedM.p50),
      p99: round(preparedM.p99),
      "decisions/s": Math.round(preparedM.perSec)
    },
    {
      mode: "cached (exact cache hits)",
      p50: round(cachedM.p50),
      p99: round(cachedM.p99),
      "decisions/s": Math.round(cachedM.perSec)
    }
  ])
  result("policy", {
    naiveP50Us: round(naive.p50),
    preparedP50Us: round(preparedM.p50),
    preparedP99Us: round(preparedM.p99),
    cachedP50Us: round(cachedM.p50),
    decisionsPerSec: Math.round(preparedM.perSec)
  })
}

await main()

import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { CedarPolicy } from "@palyra/core/cedar"
import { Config } from "@palyra/daemon"
import { Effect } from "effect"
import { expect, it } from "vitest"

const here = dirname(fileURLToPath(import.meta.url))

it("the example configuration and its policies are valid", async () => {
  const config = await Effect.runPromise(Config.load({ config: join(here, "palyra.toml") }, {}))
  expect(config.server.grpc_port).toBe(7421)
  expect(config.http_fetch.allow_hosts).toContain("api.github.com")
  expect(config.agents.map((a) => [a.id, a.tools, a.routing?.threshold])).toEqual([
    ["reader", ["fs.list", "fs.read"], 0.8]
  ])
  expect(config.bindings).toEqual([{ channel: "hooks", agent: "reader" }])
  const text = await Effect.runPromise(CedarPolicy.readPolicyDirectory(config.policiesDir!))
  const engine = await Effect.runPromise(CedarPolicy.make({ policies: text }))
  const guest = await Effect.runPromise(
    engine.decide({
      principal: "guest",
      sessionId: "01KA0000000000000000000SES" as never,
      channel: null,
      tool: { name: "http.fetch", risk: "low", category: "network" },
      args: {}
    })
  )
  expect(guest.policyIds).toEqual(["local.no-network-for-guests"])
})

import { describe, expect, it } from "vitest"
import { createPalyra, isPalyraError, scriptedModel } from "../src/index.js"

/** A model that answers with its own name and the instructions it was given. */
const named = (name: string) =>
  scriptedModel((request) => ({ text: `${name} (${request.instructions ?? "no instructions"})` }), { name })

describe("Promise API: agents and bindings", () => {
  it("each agent answers with its own model and instructions; bindings pick one; sessions keep theirs", async () => {
    const palyra = createPalyra({
      model: named("default-model"),
      instructions: "You are the default agent.",
      agents: [
        { id: "support", instructions: "You answer support questions.", model: named("support-model") },
        { id: "ops", instructions: "You run operations.", model: [named("ops-model"), named("ops-fallback")] }
      ],
      bindings: [{ channel: "slack", agent: "ops" }]
    })
    try {
      expect((await palyra.run("hello")).text).toBe("default-model (You are the default agent.)")
      const support = await palyra.run("help", { agent: "support", sessionKey: "ticket-1" })
      expect(support.text).toBe("support-model (You answer support questions.)")
      // the session keeps its agent
      expect((await palyra.run("more", { sessionKey: "ticket-1" })).text).toMatch(/^support-model/)
      // a binding: a new session from the slack channel goes to ops
      expect((await palyra.run("deploy", { channel: "slack", sessionKey: "s" })).text).toBe(
        "ops-model (You run operations.)"
      )
      // an unknown agent is refused
      const refused = await palyra.run("x", { agent: "ghost" }).then(
        () => undefined,
        (e: unknown) => e
      )
      expect(isPalyraError(refused) && refused.code).toBe("invalid_argument")
    } finally {
      await palyra.close()
    }
  })
})

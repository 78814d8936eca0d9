import { describe, expect, it } from "vitest"
import { createPalyra, type ModelProvider, scriptedModel } from "../src/index.js"

const waitFor = async <A>(read: () => Promise<A>, until: (a: A) => boolean): Promise<A> => {
  for (let i = 0; i < 300; i++) {
    const value = await read()
    if (until(value)) return value
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error("condition not reached")
}

describe("createPalyra({ memory, learning, watchdog })", () => {
  it("reflects after a run, keeps candidates per principal, and injects memory into the same principal's later prompts", async () => {
    const prompts: Array<ModelProvider.ModelRequest> = []
    const palyra = createPalyra({
      model: scriptedModel((request) => {
        prompts.push(request)
        return { text: "Noted." }
      }),
      memory: { tokenBudget: 300 },
      learning: true,
      watchdog: "observe",
      tasks: { pollInterval: "20 millis" }
    })
    try {
      await palyra.run("Remember that the staging database listens on port 5433. I usually deploy on Fridays.", {
        principal: "alice",
        sessionKey: "a1"
      })
      const pending = await waitFor(
        () => palyra.learning.list({ principal: "alice" }),
        (list) => list.length === 1
      )
      expect(pending.map((c) => [c.kind, c.text, c.confidenceBps])).toEqual([
        ["preference", "The user usually deploy on Fridays", 6000]
      ])
      expect(await palyra.learning.list({ principal: "bob" })).toEqual([])
      await expect(palyra.learning.accept(pending[0]!.id, { principal: "bob" })).rejects.toMatchObject({
        _tag: "NotFound"
      })
      const accepted = await palyra.learning.accept(pending[0]!.id, { principal: "alice" })
      expect(accepted.item?.text).toBe("The user usually deploy on Fridays")
      const [hit] = await palyra.memory.search("staging database", { principal: "alice" })
      expect(hit?.item.text).toBe("The staging database listens on port 5433")
      expect(await palyra.memory.search("staging database", { principal: "bob" })).toEqual([])

      await palyra.run("Which port does the staging database use?", { principal: "alice", sessionKey: "a2" })
      await palyra.run("Which port does the staging database use?", { principal: "bob", sessionKey: "b1" })
      const [toAlice, toBob] = prompts.filter((p) =>
        p.messages.some((m) => m.role === "user" && m.text.startsWith("Which port"))
      )
      expect(JSON.stringify(toAlice!.messages[0])).toContain("The staging database listens on port 5433")
      expect(JSON.stringify(toBob!.messages)).not.toContain("5433")
      expect(toAlice!.tools.map((t) => t.name)).toEqual(expect.arrayContaining(["memory.search", "memory.save"]))
      expect(await palyra.incidents()).toEqual([])
      expect((await palyra.tasks()).map((t) => [t.kind, t.state])).toContainEqual(["memory.reflect", "succeeded"])
    } finally {
      await palyra.close()
    }
  })

  it("a run the deterministic extractor finds nothing in gets no reflection task and no note; the next one does", async () => {
    const palyra = createPalyra({
      model: scriptedModel(() => ({ text: "Hi." })),
      memory: {},
      learning: true,
      tasks: { pollInterval: "20 millis" }
    })
    try {
      const plain = await palyra.run("Hello there, how are you today?", { principal: "alice", sessionKey: "p1" })
      const said = await palyra.run("Remember that the build runs on Tuesdays.", {
        principal: "alice",
        sessionKey: "p2"
      })
      const reflections = await waitFor(
        () => palyra.tasks({ kind: "memory.reflect" }),
        (tasks) => tasks.some((t) => t.state === "succeeded")
      )
      // Only the second run was queued (the task's payload names its run).
      expect(reflections.map((t) => [t.payload, t.state])).toEqual([[{ runId: said.runId }, "succeeded"]])
      const plainTape = await palyra.readTape(plain.sessionId)
      expect(plainTape.filter((e) => e._tag === "SessionNote" && e.author === "learning")).toEqual([])
      const saidTape = await palyra.readTape(said.sessionId)
      expect(
        saidTape.some((e) => e._tag === "SessionNote" && e.author === "learning" && e.text.startsWith("reflected"))
      ).toBe(true)
    } finally {
      await palyra.close()
    }
  })

  it("without them, the after-run methods answer NotFound (feature)", async () => {
    const palyra = createPalyra({ model: scriptedModel([{ text: "hi" }]) })
    try {
      await expect(palyra.learning.list()).rejects.toMatchObject({ _tag: "NotFound", entity: "feature" })
      await expect(palyra.memory.search("x")).rejects.toMatchObject({ _tag: "NotFound", entity: "feature" })
    } finally {
      await palyra.close()
    }
  })
})

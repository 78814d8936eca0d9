import { expect, it } from "vitest"
import { main } from "./main.js"

it("embeds Palyra with the Promise API: reads, is refused a delete, answers", async () => {
  const lines: Array<string> = []
  const result = await main((l) => lines.push(l))
  expect(result).toEqual({ state: "Done", notesLeft: ["notes.txt"] })
  expect(lines).toContain("tool files.read: ok buy milk")
  expect(lines.some((l) => l.startsWith("tool files.delete: denied"))).toBe(true)
  expect(lines.at(-1)).toBe("run Done")
})

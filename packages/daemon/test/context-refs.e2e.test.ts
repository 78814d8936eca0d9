/**
 * The real palyrad (demo model, SQLite journal) with its default `[context]`: context references
 * resolve in the workspace (secret paths refused), attachments land in the journal's file by digest,
 * an image to the demo model is a 400, and `facts_file` writes MEMORY.md on a compaction.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import Database from "better-sqlite3"
import { afterAll, expect, it } from "vitest"
import { fresh, startDaemon, stopDaemons } from "./support.js"

afterAll(stopDaemons)

const png = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64"
)

it("references, attachments and the facts file through palyrad", async () => {
  const dir = fresh("palyra-refs-e2e-")
  mkdirSync(join(dir, "workspace"))
  writeFileSync(join(dir, "workspace", "notes.md"), "The release is v4.2.0.\n")
  writeFileSync(join(dir, "workspace", ".env"), "API_TOKEN=never-to-the-model\n")
  writeFileSync(join(dir, "palyra.toml"), '[context]\nfacts_file = "MEMORY.md"\nauto_compact = false\n')
  const d = await startDaemon(dir)
  const auth = { authorization: `Bearer ${d.token}`, "content-type": "application/json" }
  const post = (path: string, body: unknown) =>
    fetch(`${d.url}${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) })
  const waitDone = async (runId: string) => {
    for (let i = 0; i < 200; i++) {
      const run = (await (await fetch(`${d.url}/v1/runs/${runId}`, { headers: auth })).json()) as { state: string }
      if (["Done", "Failed", "Cancelled"].includes(run.state)) return run.state
      await new Promise((r) => setTimeout(r, 25))
    }
    throw new Error("run did not end")
  }

  const sent = (await (
    await post("/v1/runs", {
      text: "compare @file:notes.md with @file:.env",
      sessionKey: "e2e",
      attachments: [{ name: "todo.txt", data: Buffer.from("ship v4.2.0 on Friday\n").toString("base64") }]
    })
  ).json()) as { runId: string; sessionId: string }
  expect(await waitDone(sent.runId)).toBe("Done")
  const tape = (await (await fetch(`${d.url}/v1/sessions/${sent.sessionId}/tape`, { headers: auth })).json()) as Array<
    Record<string, unknown>
  >
  const notes = tape.filter((e) => e._tag === "SessionNote" && e.author === "references").map((e) => e.text)
  expect(notes[0]).toMatch(/^@file:notes\.md resolved: 23 bytes, \d+ tokens, sha256:[0-9a-f]{64}$/)
  expect(notes[1]).toBe("@file:.env refused: secret paths are never referenced")
  const user = tape.find((e) => e._tag === "UserMessage") as { attachments: Array<{ digest: string; name: string }> }
  expect(user.attachments.map((a) => a.name)).toEqual(["todo.txt"])
  expect(JSON.stringify(tape)).not.toContain("never-to-the-model")

  // An image to the demo model (no image support): 400, nothing admitted.
  const image = await post("/v1/runs", {
    text: "look",
    sessionKey: "e2e",
    attachments: [{ data: png.toString("base64") }]
  })
  expect(image.status).toBe(400)
  expect(((await image.json()) as { message: string }).message).toBe("model demo:scripted does not accept images")

  // Enough turns for a manual compaction; its facts go to MEMORY.md in the workspace.
  for (let i = 0; i < 4; i++) {
    const r = (await (await post("/v1/runs", { text: `order ORD-77${i} is due`, sessionKey: "e2e" })).json()) as {
      runId: string
    }
    await waitDone(r.runId)
  }
  const compact = await post(`/v1/sessions/${sent.sessionId}/compact`, {})
  expect(compact.status).toBe(200)
  const memory = readFileSync(join(dir, "workspace", "MEMORY.md"), "utf8")
  expect(memory).toMatch(/^<!-- palyra:facts:start -->\n- [\s\S]*<!-- palyra:facts:end -->\n$/)
  expect(memory).toContain("ORD-77")

  // The attachment's bytes are in the journal's file, once, under their digest.
  d.proc.kill("SIGTERM")
  await d.exited
  const db = new Database(join(dir, ".palyra", "journal.db"), { readonly: true })
  const row = db.prepare("SELECT media_type, size FROM blobs WHERE digest = ?").get(user.attachments[0]!.digest)
  db.close()
  expect(row).toEqual({ media_type: "text/plain", size: 22 })
}, 60_000)

/**
 * `palyra chat --attach FILE` against a real palyrad (demo model, SQLite journal): the file's bytes
 * reach the journal as an attachment (its sha256 digest on the `UserMessage`), a missing file fails
 * before anything is sent, and a file over palyrad's limit is refused with palyrad's own message.
 */
import { createHash } from "node:crypto"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, expect, it } from "vitest"
import { type Daemon, fresh, runCli, startDaemon, stopDaemons } from "./support.js"

let dir: string
let daemon: Daemon
let env: Record<string, string>

beforeAll(async () => {
  dir = fresh("palyra-cli-attach-")
  daemon = await startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
  env = { PALYRA_URL: daemon.url }
}, 60_000)
afterAll(stopDaemons)

const tapeOf = async (sessionKey: string) => {
  const auth = { authorization: `Bearer ${daemon.token}` }
  const sessions = (await (await fetch(`${daemon.url}/v1/sessions`, { headers: auth })).json()) as Array<{
    id: string
    key: string
  }>
  const session = sessions.find((s) => s.key === sessionKey)
  if (session === undefined) return []
  return (await (await fetch(`${daemon.url}/v1/sessions/${session.id}/tape`, { headers: auth })).json()) as Array<
    Record<string, unknown>
  >
}

it("--attach sends the files with the message: their digests land on the UserMessage", async () => {
  const notes = "ship v4.2.0 on Friday\n"
  writeFileSync(join(dir, "notes.txt"), notes)
  writeFileSync(join(dir, "plan.md"), "# Plan\n- tag the release\n")
  const chat = await runCli(
    dir,
    ["chat", "read these", "--attach", "notes.txt", "-a", "plan.md", "--session-key", "att"],
    {
      env
    }
  )
  expect(chat.err).toBe("")
  expect(chat.code).toBe(0)
  const user = (await tapeOf("att")).find((e) => e._tag === "UserMessage") as {
    text: string
    attachments: Array<{ digest: string; name: string; size: number; mediaType: string }>
  }
  expect(user.text).toBe("read these")
  const sha = (s: string) => createHash("sha256").update(s).digest("hex")
  expect(user.attachments.map((a) => [a.name, a.size, a.digest.replace(/^sha256:/, "")])).toEqual([
    ["notes.txt", notes.length, sha(notes)],
    ["plan.md", 25, sha("# Plan\n- tag the release\n")]
  ])
  expect(user.attachments[1]!.mediaType).toMatch(/^text\/markdown/)
}, 90_000)

it("a missing file fails before anything is sent", async () => {
  const chat = await runCli(dir, ["chat", "hello", "--attach", "nope.txt", "--session-key", "missing"], { env })
  expect(chat.code).toBe(1)
  expect(chat.err).toContain("cannot attach nope.txt: no such file")
  expect(await tapeOf("missing")).toEqual([])
}, 90_000)

it("a file over palyrad's limit is refused with palyrad's message", async () => {
  writeFileSync(join(dir, "big.txt"), "x".repeat(2 * 1024 * 1024))
  const chat = await runCli(dir, ["chat", "hello", "--attach", "big.txt", "--session-key", "big"], { env })
  expect(chat.code).toBe(1)
  expect(chat.err).toMatch(/payload_too_large: .*limit/)
  expect(await tapeOf("big")).toEqual([])
}, 90_000)

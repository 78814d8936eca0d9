/**
 * End-to-end: palyrad with a `[[channels]] kind = "slack"` entry, its replies going to a local
 * server that speaks Slack's Web API; the operator pairs a Slack user with the real `palyra pairing`
 * CLI (over palyrad's `/v1/pairing` routes), the user sends the code in a signed Events API request,
 * chats in a thread, and is unpaired again.
 */
import { createHmac } from "node:crypto"
import { writeFileSync } from "node:fs"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { fresh, runCli, startDaemon, stopDaemons } from "./support.js"

afterEach(stopDaemons)

const TOKEN = "xoxb-1111-2222-TESTtokenABCDEF"
const SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
const ALICE_TOKEN = "alice-token-0123456789abcdefghij"

interface Posted {
  readonly channel: string
  readonly text: string
  readonly thread_ts: string | undefined
}

/** Slack's Web API, the part a bot uses: auth.test and chat.postMessage (form or JSON bodies). */
const slackApi = async () => {
  const posted: Array<Posted> = []
  let ts = 1_800_000_000
  const read = (req: IncomingMessage) =>
    new Promise<string>((r) => {
      let body = ""
      req.on("data", (c) => (body += c))
      req.on("end", () => r(body))
    })
  const server = createServer(async (req, res) => {
    const raw = await read(req)
    const params: Record<string, unknown> = (req.headers["content-type"] ?? "").includes("json")
      ? JSON.parse(raw)
      : Object.fromEntries(new URLSearchParams(raw))
    const answer = (body: unknown) =>
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body))
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return answer({ ok: false, error: "invalid_auth" })
    if (req.url === "/api/auth.test") return answer({ ok: true, user_id: "U0BOT", team_id: "T0001", bot_id: "B0BOT" })
    if (req.url === "/api/chat.postMessage") {
      const message = {
        channel: String(params.channel),
        text: String(params.text),
        thread_ts: typeof params.thread_ts === "string" ? params.thread_ts : undefined
      }
      posted.push(message)
      return answer({ ok: true, channel: message.channel, ts: `${++ts}.000200` })
    }
    return answer({ ok: false, error: "unknown_method" })
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  return {
    posted,
    root: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/`,
    close: () => server.close()
  }
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const probe = createServer()
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo
      probe.close(() => resolve(port))
    })
  })

const waitFor = async <A>(read: () => A | undefined, what: string): Promise<A> => {
  for (let i = 0; i < 300; i++) {
    const value = read()
    if (value !== undefined) return value
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`timed out waiting for ${what}`)
}

let seq = 0
const event = (text: string, threadTs?: string) => {
  const ts = `${1_700_000_000 + ++seq}.000100`
  return {
    type: "event_callback",
    team_id: "T0001",
    event_id: `Ev${seq}`,
    event: {
      type: "message",
      channel: "D1",
      channel_type: "im",
      user: "U1",
      text,
      ts,
      ...(threadTs === undefined ? {} : { thread_ts: threadTs })
    }
  }
}

describe("pairing a Slack user through the palyra CLI against the real palyrad", () => {
  it("mint → the code in a DM pairs → a threaded answer → identities → unpair → a stranger again", async () => {
    const slack = await slackApi()
    const port = await freePort()
    const dir = fresh("palyra-pairing-")
    writeFileSync(
      join(dir, "palyra.toml"),
      `[[channels]]\nkind = "slack"\nname = "slack"\nsigning_secret = "${SECRET}"\nbot_token = "${TOKEN}"\n` +
        `api_root = "${slack.root}"\nlisten_port = ${port}\n` +
        `[[auth.tokens]]\ntoken = "${ALICE_TOKEN}"\nprincipal = "alice"\n`
    )
    try {
      const daemon = await startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
      const cli = (...args: Array<string>) => runCli(dir, [...args, "--url", daemon.url])
      const deliver = (payload: unknown) => {
        const body = JSON.stringify(payload)
        const t = Math.floor(Date.now() / 1000)
        return fetch(`http://127.0.0.1:${port}/slack/events`, {
          method: "POST",
          body,
          headers: {
            "content-type": "application/json",
            "x-slack-request-timestamp": String(t),
            "x-slack-signature": `v0=${createHmac("sha256", SECRET).update(`v0:${t}:${body}`).digest("hex")}`
          }
        })
      }

      // operator-only: alice's own token is refused (403, exit 1), whatever she asks
      const refused = await cli("pairing", "mint", "slack", "--principal", "alice", "--token", ALICE_TOKEN)
      expect(refused.code).toBe(1)
      expect(refused.err).toMatch(/operator/)
      const refusedList = await cli("pairing", "identities", "--token", ALICE_TOKEN)
      expect(refusedList.code).toBe(1)

      const minted = await cli("pairing", "mint", "slack", "--principal", "alice", "--ttl", "5m", "--json")
      expect(minted.code, minted.err).toBe(0)
      const code: string = JSON.parse(minted.out).code
      expect(code).toMatch(/^[0-9A-Z]{8}$/)
      const listed = await cli("pairing", "list", "--json")
      expect(JSON.parse(listed.out)).toMatchObject([{ status: "active", principal: "alice", channel: "slack" }])
      expect(listed.out).not.toContain(code)

      expect((await deliver(event(code))).status).toBe(200)
      const paired = await waitFor(() => slack.posted[0], "the pairing answer")
      expect(paired).toMatchObject({ channel: "D1", text: expect.stringMatching(/Paired.*as alice/) })

      expect((await deliver(event("what time is it", "1699999999.000100"))).status).toBe(200)
      const answer = await waitFor(() => slack.posted[1], "the answer")
      expect(answer.thread_ts).toBe("1699999999.000100")
      expect(answer.text).toMatch(/time\.now returned/)

      const identities = await cli("pairing", "identities", "--channel", "slack", "--json")
      const [identity] = JSON.parse(identities.out)
      expect(identity).toMatchObject({ senderId: "U1", principal: "alice", active: true, createdBy: "pairing-code" })
      expect(JSON.parse((await cli("pairing", "list", "--json")).out)[0].status).toBe("used")

      const unpaired = await cli("pairing", "unpair", identity.id)
      expect(unpaired.code, unpaired.err).toBe(0)
      expect(unpaired.out).toMatch(/slack\/U1: unpaired from alice/)
      expect((await deliver(event("hello again"))).status).toBe(200)
      const hint = await waitFor(() => slack.posted[2], "the pairing hint")
      expect(hint.text).toMatch(/pairing code/)

      // a revoked or unknown code: a clear failure, exit 1
      const missing = await cli("pairing", "revoke", "ZZZZZZZZ")
      expect(missing.code).toBe(1)
    } finally {
      slack.close()
    }
  }, 150_000)

  it("without [[channels]] the pairing routes say channels are not configured", async () => {
    const dir = fresh("palyra-pairing-")
    const daemon = await startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
    const listed = await runCli(dir, ["pairing", "list", "--url", daemon.url])
    expect(listed.code).toBe(1)
    expect(listed.err).toMatch(/channels are not configured/)
  }, 90_000)
})

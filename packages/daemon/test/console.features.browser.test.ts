/**
 * The web console's pages for the after-run and channel features, in Debian's chromium against a
 * real palyrad on 127.0.0.1 (memory and learning on as by default, the model served by a local
 * server speaking OpenAI's API, and a signed webhook channel so pairing works): mint a pairing
 * code (shown once, copied, listed), revoke it; a code minted by keyboard pairs an identity through
 * the channel's real signed webhook, unpaired in the page; a finished run leaves a pending learning
 * candidate, accepted in the page and then found (and forgotten) on the Memory page, another
 * rejected with a reason; a reflection held at the model keeps the next one queued, cancelled on
 * the Tasks page; the Incidents page's empty state, and (another daemon, a fast watchdog) a new
 * incident shown without a reload. Without channels or watchdog, and for a non-operator, only the
 * pages the daemon answers are in the navigation and Pairing shows "channels are not configured".
 * Each page is scanned with axe-core (no serious or critical violation) and photographed at
 * desktop and 360 px; no console error anywhere.
 */
import { createHmac } from "node:crypto"
import { writeFileSync } from "node:fs"
import { createServer, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import type { Browser, BrowserContext, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hasChromium, launch, poll, scan, shoot, signIn, visit, watch } from "./console.support.js"
import { type Daemon, fresh, startDaemon, stopDaemons } from "./support.js"

const SECRET = "console-test-signing-secret-0123456789"

const freePort = () =>
  new Promise<number>((resolve) => {
    const probe = createServer()
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo
      probe.close(() => resolve(port))
    })
  })

/**
 * The model, served by a local server speaking OpenAI's chat-completions API (streamed): it answers
 * "Noted." to everything, so reflection falls back to the deterministic extractor. While `hold` is
 * on, reflection requests are held open, which keeps a reflection task running and the next one
 * queued (one at a time per kind).
 */
const modelServer = async () => {
  const held: Array<ServerResponse> = []
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
  const answer = (res: ServerResponse) => {
    res.write(chunk({ content: "Noted." }))
    res.end(`${chunk({}, "stop")}data: [DONE]\n\n`)
  }
  const state = { hold: false }
  const server = createServer((req, res) => {
    let body = ""
    req.on("data", (d) => (body += d))
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.write(chunk({ role: "assistant", content: "" }))
      if (state.hold && body.includes("You review a finished conversation")) held.push(res)
      else answer(res)
    })
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    state,
    held,
    release: () => {
      state.hold = false
      for (const res of held.splice(0)) answer(res)
    },
    close: () => {
      server.closeAllConnections()
      server.close()
    }
  }
}

let model: Awaited<ReturnType<typeof modelServer>>
let daemon: Daemon
let hookPort: number
let browser: Browser
let context: BrowserContext
let tab: Page
const problems: Array<string> = []

// biome-ignore lint/suspicious/noExplicitAny: JSON from the API, checked field by field
type Json = any
const api = async (path: string, init: RequestInit = {}): Promise<Json> => {
  const response = await fetch(`${daemon.url}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${daemon.token}`, "content-type": "application/json" }
  })
  return response.json()
}

/** A direct message through the webhook channel, signed as its connector expects. */
const deliver = async (senderId: string, text: string) => {
  const body = JSON.stringify({
    account: "console-test",
    conversation: `dm-${senderId}`,
    sender: { id: senderId, verified: true },
    platformMessageId: `m-${senderId}-${Date.now()}`,
    text,
    attachments: [],
    isDirect: true,
    mentions: [],
    receivedAt: Date.now()
  })
  const t = Math.floor(Date.now() / 1000)
  const signature = `v1=${createHmac("sha256", SECRET).update(`${t}.${body}`).digest("hex")}`
  const response = await fetch(`http://127.0.0.1:${hookPort}/inbound`, {
    method: "POST",
    body,
    headers: { "content-type": "application/json", "x-palyra-timestamp": String(t), "x-palyra-signature": signature }
  })
  expect(response.status).toBe(202)
}

describe.skipIf(!hasChromium)("the console's feature pages in chromium", () => {
  beforeAll(async () => {
    hookPort = await freePort()
    model = await modelServer()
    const dir = fresh("palyra-console-features-")
    writeFileSync(
      join(dir, "palyra.toml"),
      `model = "openai-compatible:${model.url}#m"\n\n[learning]\nmodel = "session"\n\n[[channels]]\nname = "hooks"\nkind = "webhook"\nsigning_secret = "${SECRET}"\nlisten_port = ${hookPort}\n`
    )
    ;[daemon, browser] = await Promise.all([startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" }), launch()])
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: daemon.url })
    context.setDefaultTimeout(15_000)
    tab = watch(await context.newPage(), "features", problems)
    await signIn(tab, daemon.url, daemon.token)
  }, 90_000)
  afterAll(async () => {
    await browser?.close()
    stopDaemons()
    model?.close()
  })

  it("shows the feature pages in the navigation when the daemon offers them", async () => {
    const nav = tab.getByRole("navigation", { name: "Main" })
    for (const name of ["Pairing", "Tasks", "Learning", "Memory", "Incidents"])
      await nav.getByRole("link", { name, exact: true }).waitFor()
  })

  it("pairing: mint a code (shown once, copied, listed as active), revoke it", async () => {
    await visit(tab, daemon.url, "pairing", "Pairing")
    await tab.getByText("No pairing codes.").waitFor()
    await tab.getByLabel("Channel").fill("hooks")
    await tab.getByLabel("Principal").fill("alice")
    await tab.getByLabel("Valid for").selectOption("3600")
    await tab.getByRole("button", { name: "Mint code" }).click()
    const code = (await tab.getByTestId("minted-code").textContent()) ?? ""
    expect(code).toMatch(/^[0-9A-Z]{8}$/)
    await tab.getByRole("button", { name: /Copy/ }).click()
    await tab.getByRole("button", { name: /Copied/ }).waitFor()
    expect(await tab.evaluate("navigator.clipboard.readText()")).toBe(code)
    const row = tab.locator("tbody tr").filter({ hasText: "alice" })
    await row.getByText("active", { exact: true }).waitFor()
    // Listed by id: the code itself is only in the answer that minted it.
    const listed = await api("/v1/pairing/codes")
    expect(listed).toMatchObject([{ channel: "hooks", principal: "alice", status: "active" }])
    expect(JSON.stringify(listed)).not.toContain(code)
    await expect(tab.locator("table").first().textContent()).resolves.not.toContain(code)
    await scan(tab, "pairing")
    await shoot(tab, "pairing")
    await row.getByRole("button", { name: /Revoke/ }).click()
    await row.getByText("revoked", { exact: true }).waitFor()
    expect((await api("/v1/pairing/codes"))[0].status).toBe("revoked")
    // After a reload the code is gone for good: only its id and status remain.
    await visit(tab, daemon.url, "pairing", "Pairing")
    await tab.locator("tbody tr").filter({ hasText: "revoked" }).waitFor()
    expect(await tab.getByTestId("minted-code").count()).toBe(0)
  })

  it("pairing: a code minted by keyboard pairs an identity through the signed webhook; listed, then unpaired from the page", async () => {
    // Minted by keyboard alone: type, Tab to the next field, Enter submits.
    await visit(tab, daemon.url, "pairing", "Pairing")
    await tab.getByLabel("Channel").focus()
    await tab.keyboard.type("hooks")
    await tab.keyboard.press("Tab")
    await tab.keyboard.type("bob")
    await tab.keyboard.press("Enter")
    const minted = { code: (await tab.getByTestId("minted-code").textContent()) ?? "" }
    expect(minted.code).toMatch(/^[0-9A-Z]{8}$/)
    await deliver("U-BOB", minted.code)
    await poll(
      () => api("/v1/pairing/identities"),
      (list: Json) => list.length === 1,
      "the identity to be paired"
    )
    await visit(tab, daemon.url, "pairing", "Pairing")
    const identity = tab.locator("tbody tr").filter({ hasText: "U-BOB" })
    await identity.getByText("active", { exact: true }).waitFor()
    await expect(identity.textContent()).resolves.toContain("bob")
    await identity.getByRole("button", { name: /Unpair/ }).click()
    await identity.getByText("unpaired", { exact: true }).waitFor()
    expect((await api("/v1/pairing/identities"))[0].active).toBe(false)
  })

  it("learning → memory: a finished run's pending candidate is accepted, then found and forgotten on the Memory page", async () => {
    const { runId } = await api("/v1/runs", {
      method: "POST",
      body: JSON.stringify({
        text: "Remember that the staging database is on port 5433. I usually deploy on Fridays.",
        sessionKey: "console-learn"
      })
    })
    await poll(
      () => api("/v1/learning/candidates"),
      (list: Json) => list.length > 0,
      "a pending learning candidate"
    )
    await visit(tab, daemon.url, "learning", "Learning")
    const card = tab.getByRole("article").filter({ hasText: "deploy on Fridays" })
    await card.getByText("60%", { exact: true }).waitFor()
    await card.getByText("preference", { exact: true }).waitFor()
    await expect(card.getByRole("link").textContent()).resolves.toContain(runId.slice(-6))
    await scan(tab, "learning")
    await shoot(tab, "learning")
    await card.getByRole("button", { name: "Accept" }).click()
    await tab.getByText("No pending candidates.").waitFor()
    await tab.getByLabel("Show").selectOption("accepted")
    await tab.getByRole("article").filter({ hasText: "accepted by operator" }).waitFor()

    await tab.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Memory" }).click()
    await tab.getByRole("heading", { level: 1, name: "Memory" }).waitFor()
    await tab.getByLabel("Search memory").fill("deploy Fridays")
    await tab.getByRole("button", { name: "Search" }).click()
    const item = tab.locator("li.card").filter({ hasText: "The user usually deploy on Fridays" })
    await item.waitFor()
    await expect(item.textContent()).resolves.toContain(`from run …${runId.slice(-6)}`)
    await scan(tab, "memory")
    await shoot(tab, "memory")
    await item.getByRole("button", { name: /Forget/ }).click()
    await item.waitFor({ state: "detached" })
    const left = await api(`/v1/memory?q=${encodeURIComponent("deploy Fridays")}`)
    expect(left.map((h: Json) => h.item.text)).not.toContain("The user usually deploy on Fridays")
  })

  it("learning: a pending candidate rejected with a reason stays out of memory", async () => {
    await api("/v1/runs", {
      method: "POST",
      body: JSON.stringify({ text: "I usually drink tea in the morning.", sessionKey: "console-reject" })
    })
    await poll(
      () => api("/v1/learning/candidates"),
      (list: Json) => list.length > 0,
      "a pending learning candidate"
    )
    await visit(tab, daemon.url, "learning", "Learning")
    const card = tab.getByRole("article").filter({ hasText: "drink tea" })
    await card.getByLabel("Reason").fill("only on weekends")
    await card.getByRole("button", { name: "Reject" }).click()
    await tab.getByText("No pending candidates.").waitFor()
    await tab.getByLabel("Show").selectOption("rejected")
    const rejected = tab.getByRole("article").filter({ hasText: "drink tea" })
    await expect(rejected.textContent()).resolves.toContain("rejected by operator")
    await expect(rejected.textContent()).resolves.toContain("only on weekends")
    expect(await api(`/v1/memory?q=${encodeURIComponent("drink tea")}`)).toEqual([])
  })

  it("tasks: reflection tasks are listed; a queued one is cancelled from the page", async () => {
    await visit(tab, daemon.url, "tasks", "Tasks")
    await tab.locator("tbody tr").filter({ hasText: "memory.reflect" }).getByText("succeeded").first().waitFor()
    await scan(tab, "tasks")
    await shoot(tab, "tasks")
    // One reflection held at the model (running), the next one waits its turn (queued).
    model.state.hold = true
    const first = await api("/v1/runs", { method: "POST", body: JSON.stringify({ text: "one", sessionKey: "t1" }) })
    await poll(
      () => api("/v1/tasks?state=running"),
      (list: Json) => list.some((t: Json) => t.payload?.runId === first.runId),
      "the first reflection to be running"
    )
    const second = await api("/v1/runs", { method: "POST", body: JSON.stringify({ text: "two", sessionKey: "t2" }) })
    const queued = (
      await poll(
        () => api("/v1/tasks?state=queued"),
        (list: Json) => list.some((t: Json) => t.payload?.runId === second.runId),
        "the second reflection to be queued"
      )
    ).find((t: Json) => t.payload?.runId === second.runId)
    await tab.getByLabel("State").selectOption("queued")
    const row = tab.locator("tbody tr").filter({ hasText: queued.id.slice(-6) })
    await row.getByRole("button", { name: /Cancel/ }).click()
    await tab.getByText("No tasks.").waitFor()
    expect((await api("/v1/tasks?state=cancelled")).map((t: Json) => t.id)).toEqual([queued.id])
    model.release()
    await poll(
      () => api("/v1/tasks?state=running"),
      (list: Json) => list.length === 0,
      "the held reflection to finish"
    )
    await tab.getByLabel("State").selectOption("cancelled")
    await tab
      .locator("tbody tr")
      .filter({ hasText: queued.id.slice(-6) })
      .getByText("cancelled")
      .waitFor()
  })

  it("incidents: the empty state, open and all", async () => {
    await visit(tab, daemon.url, "incidents", "Incidents")
    await tab.getByText("No open incidents.").waitFor()
    await tab.getByLabel("Open only").uncheck()
    await tab.getByText("No incidents.").waitFor()
    await scan(tab, "incidents")
    await shoot(tab, "incidents")
    expect(problems).toEqual([])
  })
})

const ALICE = "alice-console-token-0123456789abcdef"
const navLinks = (page: Page) => page.getByRole("navigation", { name: "Main" }).getByRole("link").allTextContents()

describe.skipIf(!hasChromium)("the console without channels or watchdog, and for a non-operator", () => {
  it("shows only the pages the daemon answers for this user; Pairing shows the daemon's message", async () => {
    const dir = fresh("palyra-console-nochannels-")
    writeFileSync(
      join(dir, "palyra.toml"),
      `[watchdog]\nmode = "off"\n\n[[auth.tokens]]\ntoken = "${ALICE}"\nprincipal = "alice"\n`
    )
    const [plain, own] = await Promise.all([startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" }), launch()])
    const seen: Array<string> = []
    // Chromium logs every error status: the feature probes' 403/404 and the Pairing page's 409 are expected.
    const expected = (t: string) => /status of (401|403|404|409)/.test(t)
    try {
      const page = watch(await own.newPage(), "no channels", seen, expected)
      await signIn(page, plain.url, plain.token)
      await page.getByRole("link", { name: "Memory", exact: true }).waitFor()
      expect(await navLinks(page)).toEqual([
        "Approvals",
        "Sessions",
        "Runs",
        "Grants",
        "Journal",
        "Pairing",
        "Tasks",
        "Learning",
        "Memory"
      ])
      await visit(page, plain.url, "pairing", "Pairing")
      await expect(page.getByRole("alert").textContent()).resolves.toContain("channels are not configured")
      // The form shows only once the codes answered, so it never flashes up here.
      expect(await page.getByRole("button", { name: "Mint code" }).count()).toBe(0)
      await scan(page, "pairing-unavailable")

      // alice is no operator: her own learning and memory only.
      const hers = watch(await (await own.newContext()).newPage(), "alice", seen, expected)
      await signIn(hers, plain.url, ALICE)
      await hers.getByRole("link", { name: "Memory", exact: true }).waitFor()
      expect(await navLinks(hers)).toEqual(["Approvals", "Sessions", "Runs", "Grants", "Journal", "Learning", "Memory"])
      expect(seen).toEqual([])
    } finally {
      await own.close()
      stopDaemons()
    }
  }, 60_000)
})

describe.skipIf(!hasChromium)("the Incidents page, live", () => {
  it("shows a new incident without a reload (an approval left waiting), with its kind, subject and detail", async () => {
    const dir = fresh("palyra-console-incidents-")
    writeFileSync(
      join(dir, "palyra.toml"),
      `[watchdog]\nmode = "observe"\ninterval_seconds = 1\napproval_warn_seconds = 1\n`
    )
    const [d, own] = await Promise.all([startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" }), launch()])
    const seen: Array<string> = []
    try {
      const page = watch(await own.newPage(), "incidents", seen)
      await signIn(page, d.url, d.token)
      await visit(page, d.url, "incidents", "Incidents")
      await page.getByText("No open incidents.").waitFor()
      // The demo model's fs.write waits for approval; nobody answers.
      const started = await fetch(`${d.url}/v1/runs`, {
        method: "POST",
        headers: { authorization: `Bearer ${d.token}`, "content-type": "application/json" },
        body: JSON.stringify({ text: "please write a note", sessionKey: "console-incident" })
      })
      expect(started.status).toBe(202)
      const card = page.getByRole("article").filter({ hasText: "approval_pending" })
      await card.waitFor({ timeout: 20_000 })
      await card.getByText("open", { exact: true }).waitFor()
      await card.getByRole("link").waitFor() // the subject links to the waiting run's session
      await expect(page.locator("p.lede").textContent()).resolves.toMatch(/^\d+ open$/)
      await scan(page, "incidents-open")
      await shoot(page, "incidents-open")
      expect(seen).toEqual([])
    } finally {
      await own.close()
      stopDaemons()
    }
  }, 60_000)
})

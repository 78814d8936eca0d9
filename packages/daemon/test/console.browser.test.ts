/**
 * The web console in a real browser (Debian's chromium driven by playwright-core; no browser is
 * ever downloaded) against a real palyrad on 127.0.0.1 running the demo model, whose `fs.write`
 * needs approval. Sign-in (a bad token shows an error), the live approvals inbox in two tabs
 * (approve, deny, always → a grant), acting after a reload and from a new tab (the CSRF token
 * comes back from the same-origin `POST /v1/auth/session/csrf`), the session's tape with the tool result, revoking the grant,
 * verifying the journal, sign-out; every page scanned with axe-core (no serious or critical
 * violation), no console error or page error anywhere, screenshots of each page at desktop and
 * 360 px in `artifacts/console/` (git-ignored).
 *
 * Needs the built console (`pnpm --filter @palyra/console build`; the test command's build step
 * does it). Skips with one loud message when chromium is missing and could not be installed.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import type { Browser, BrowserContext, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  EXPECTED_401,
  EXPECTED_409,
  hasChromium,
  launch,
  visit as open,
  poll,
  scan,
  shoot,
  watch as watchPage
} from "./console.support.js"
import { type Daemon, fresh, startDaemon, stopDaemons } from "./support.js"

let daemon: Daemon
let browser: Browser
let context: BrowserContext
let tab: Page
let other: Page
const problems: Array<string> = []

const watch = (page: Page, name: string) => watchPage(page, name, problems)
const visit = (page: Page, route: string, heading: string) => open(page, daemon.url, route, heading)
const EXPECTED_403 = "Failed to load resource: the server responded with a status of 403 (Forbidden)"

const bearer = () => ({ authorization: `Bearer ${daemon.token}`, "content-type": "application/json" })
const startRun = async (text: string, sessionKey: string) => {
  const response = await fetch(`${daemon.url}/v1/runs`, {
    method: "POST",
    headers: bearer(),
    body: JSON.stringify({ text, sessionKey })
  })
  expect(response.status).toBe(202)
  return (await response.json()) as { runId: string; sessionId: string }
}
const runState = async (id: string) =>
  ((await (await fetch(`${daemon.url}/v1/runs/${id}`, { headers: bearer() })).json()) as { state: string }).state

describe.skipIf(!hasChromium)("the web console in chromium", () => {
  beforeAll(async () => {
    ;[daemon, browser] = await Promise.all([
      startDaemon(fresh("palyra-console-"), ["--port", "0"], { PALYRA_GRPC_PORT: "0" }),
      launch()
    ])
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    context.setDefaultTimeout(10_000)
    tab = watch(await context.newPage(), "tab 1")
  }, 60_000)
  afterAll(async () => {
    await browser?.close()
    stopDaemons()
  })

  it("refuses a bad token with a message, then signs in with the admin token", async () => {
    await tab.goto(daemon.url)
    await tab.getByLabel("Token").waitFor()
    await scan(tab, "sign-in")
    await shoot(tab, "sign-in")
    await tab.getByLabel("Token").fill("not-the-token")
    await tab.getByRole("button", { name: "Sign in" }).click()
    await expect(tab.getByRole("alert").textContent()).resolves.toContain("That token was not accepted.")
    expect(await context.cookies()).toEqual([])
    await tab.getByLabel("Token").fill(daemon.token)
    await tab.getByRole("button", { name: "Sign in" }).click()
    await tab.getByRole("heading", { level: 1, name: "Approvals" }).waitFor()
    const [cookie] = await context.cookies()
    expect(cookie).toMatchObject({ name: "palyra_session", httpOnly: true, sameSite: "Strict" })
    expect(cookie?.value).not.toContain(daemon.token)
    // The token is nowhere in the page's storage.
    const stored = await tab.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }))
    expect(stored).not.toContain(daemon.token)
    // Tab 2 also meets one refused stale CSRF token on purpose (below).
    other = watchPage(await context.newPage(), "tab 2", problems, (text) =>
      [EXPECTED_401, EXPECTED_409, EXPECTED_403].includes(text)
    )
    await visit(other, "approvals", "Approvals")
  })

  it("shows a new approval live in both tabs; approving it completes the run and the tape shows the result", async () => {
    await tab.getByText("Nothing is waiting for you.").waitFor()
    const started = Date.now()
    const { runId, sessionId } = await startRun("please write a note", "console-approve")
    const card = tab.getByRole("article").filter({ hasText: "fs.write" })
    await card.waitFor()
    console.log(`[console] approval visible ${Date.now() - started} ms after POST /v1/runs`)
    await other.getByRole("article").filter({ hasText: "fs.write" }).waitFor()
    await card.locator("pre", { hasText: '"path": "notes/palyra-demo.txt"' }).waitFor()
    await card.locator("dd", { hasText: "require_approval" }).waitFor()
    await scan(tab, "approvals")
    await shoot(tab, "approvals")
    await card.getByRole("button", { name: "Approve once" }).click()
    // The other tab sees it go without a reload.
    await other.getByText("Nothing is waiting for you.").waitFor()
    await poll(
      () => runState(runId),
      (s) => s === "Done",
      "the run to complete"
    )
    await visit(tab, `sessions/${sessionId}`, "console-approve")
    const tool = tab.locator("li.tool").filter({ hasText: "fs.write" })
    await tool.getByText("ok", { exact: true }).waitFor()
    await expect(tool.textContent()).resolves.toContain("approved by operator")
    await tab.locator("li.msg.assistant").filter({ hasText: "Here is what fs.write returned" }).waitFor()
    await scan(tab, "session")
    await shoot(tab, "session")
  })

  it("sends a message into the session from the tape view and streams the answer", async () => {
    await tab.getByLabel("Message").fill("what time is it")
    await tab.getByRole("button", { name: "Send" }).click()
    await tab.locator("li.msg.user").filter({ hasText: "what time is it" }).waitFor()
    await tab.locator("li.tool").filter({ hasText: "time.now" }).getByText("ok", { exact: true }).waitFor()
  })

  it("keeps acting after a reload and from a new tab: the CSRF token comes back same-origin, never from a read", async () => {
    const tokenIn = (page: Page) => page.evaluate(() => sessionStorage.getItem("palyra.csrf"))
    const mine = await tokenIn(tab)
    expect(mine).toMatch(/^[A-Za-z0-9_-]{43}$/)
    // Tab 2 never signed in: it got the same session's token from POST /v1/auth/session/csrf.
    expect(await tokenIn(other)).toBe(mine)
    // A read of the session never carries it.
    const read = await tab.evaluate(() => fetch("/v1/auth/session").then((r) => r.text()))
    expect(read).toContain('"principal"')
    expect(read).not.toContain(mine)
    // Reload, then approve: the tab's token survived in sessionStorage.
    await visit(tab, "approvals", "Approvals")
    await tab.reload()
    await tab.getByRole("heading", { level: 1, name: "Approvals" }).waitFor()
    await tab.getByText("Nothing is waiting for you.").waitFor()
    const first = await startRun("please write after reload", "console-reload")
    await tab.getByRole("article").filter({ hasText: "fs.write" }).getByRole("button", { name: "Approve once" }).click()
    await poll(
      () => runState(first.runId),
      (s) => s === "Done",
      "the run approved after a reload to complete"
    )
    // Tab 2 acts too; then it loses its storage (as a fresh tab has none), reloads, asks again and acts.
    // (Two tabs only: Chromium allows six HTTP/1.1 connections per host, and each tab holds live streams.)
    await other.getByText("Nothing is waiting for you.").waitFor()
    await other.evaluate(() => sessionStorage.clear())
    await other.reload()
    await other.getByText("Nothing is waiting for you.").waitFor()
    await poll(
      () => tokenIn(other),
      (t) => t === mine,
      "the reloaded tab to get its token back"
    )
    // A stale token (as after another tab signed in again) is refused once, then replaced.
    await other.evaluate(() => sessionStorage.setItem("palyra.csrf", "stale"))
    const second = await startRun("please write from the second tab", "console-new-tab")
    const approve = other
      .getByRole("article")
      .filter({ hasText: "fs.write" })
      .getByRole("button", { name: "Approve once" })
    await approve.click()
    await poll(
      () => tokenIn(other),
      (t) => t === mine,
      "the stale token to be replaced"
    )
    expect(await runState(second.runId)).toBe("WaitingForApproval")
    await approve.click()
    await poll(
      () => runState(second.runId),
      (s) => s === "Done",
      "the run approved from the second tab to complete"
    )
    await tab.getByText("Nothing is waiting for you.").waitFor()
    // Leave tab 1 elsewhere, so the next test's visit to the inbox is an in-app navigation, not a reload.
    await visit(tab, "runs", "Runs")
  })

  it("denies from the inbox: the run ends and the tool never runs", async () => {
    await visit(tab, "approvals", "Approvals")
    const { runId, sessionId } = await startRun("write a note please", "console-deny")
    const card = tab.getByRole("article").filter({ hasText: "fs.write" })
    await card.getByRole("button", { name: "Deny" }).click()
    await other.getByText("Nothing is waiting for you.").waitFor()
    await poll(
      () => runState(runId),
      (s) => s === "Done",
      "the denied run to end"
    )
    await visit(tab, `sessions/${sessionId}`, "console-deny")
    await tab.locator("li.tool").getByText("denied", { exact: true }).waitFor()
  })

  it("always-approve makes a grant, shown as its Cedar policy, and revoking it works", async () => {
    await visit(tab, "approvals", "Approvals")
    const { runId } = await startRun("save a note", "console-grant")
    const card = tab.getByRole("article").filter({ hasText: "fs.write" })
    await card.getByText("Limits for a standing grant").click()
    await card.getByLabel("Uses at most").fill("3")
    await card.getByRole("button", { name: "Always approve" }).click()
    await poll(
      () => runState(runId),
      (s) => s === "Done",
      "the granted run to complete"
    )
    await visit(tab, "grants", "Grants")
    const grant = tab.getByRole("article").filter({ hasText: "fs.write" })
    await expect(grant.locator("pre").textContent()).resolves.toMatch(/permit\s*\(/)
    await expect(grant.textContent()).resolves.toContain("of 3 times")
    await scan(tab, "grants")
    await shoot(tab, "grants")
    await grant.getByRole("button", { name: /Revoke/ }).click()
    await grant.getByText("revoked", { exact: true }).waitFor()
    const grants = (await (await fetch(`${daemon.url}/v1/grants`, { headers: bearer() })).json()) as Array<{
      status: string
    }>
    expect(grants.map((g) => g.status)).toEqual(["revoked"])
  })

  it("cancelling a waiting run on the Runs page closes its approval in the other tab's inbox", async () => {
    await visit(tab, "approvals", "Approvals")
    const { runId } = await startRun("write it down", "console-cancel")
    await other.getByRole("article").filter({ hasText: "fs.write" }).waitFor()
    await visit(tab, "runs", "Runs")
    const row = tab.locator("tbody tr").filter({ hasText: "WaitingForApproval" })
    await row.getByRole("button", { name: /Cancel/ }).click()
    await poll(
      () => runState(runId),
      (s) => s === "Cancelled",
      "the run to be cancelled"
    )
    await other.getByText("Nothing is waiting for you.").waitFor()
    await tab.locator("tbody tr").filter({ hasText: "Cancelled" }).waitFor()
  })

  // The inbox lists what is pending when its live stream is ready; an approval requested while that
  // list is on its way arrives as a live event first, and the older list must not undo it.
  it("an approval requested while the inbox's list loads stays in the inbox", async () => {
    await visit(tab, "runs", "Runs")
    let snapshot: () => void = () => {}
    const taken = new Promise<void>((r) => {
      snapshot = r
    })
    let release: () => void = () => {}
    const released = new Promise<void>((r) => {
      release = r
    })
    let fulfilled: () => void = () => {}
    const answered = new Promise<void>((r) => {
      fulfilled = r
    })
    await tab.route(/\/v1\/approvals\?status=pending$/, async (route) => {
      const response = await route.fetch() // the list as it is now: nothing pending
      snapshot()
      await released
      await route.fulfill({ response })
      fulfilled()
    })
    await visit(tab, "approvals", "Approvals")
    await taken
    const { runId } = await startRun("write down the late one", "console-late")
    const card = tab.getByRole("article").filter({ hasText: "fs.write" })
    await card.waitFor() // from the live event
    release()
    await answered
    await tab.unroute(/\/v1\/approvals\?status=pending$/)
    // Two frames for the page to apply the older list.
    await tab.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    expect(await card.count()).toBe(1)
    await card.getByRole("button", { name: "Deny" }).click()
    await poll(
      () => runState(runId),
      (s) => s === "Done",
      "the denied run to end"
    )
    await tab.getByText("Nothing is waiting for you.").waitFor()
    await visit(tab, "runs", "Runs")
  })

  it("lists runs and sessions, and verifies the journal", async () => {
    await visit(tab, "runs", "Runs")
    await tab.locator("tbody tr").first().waitFor()
    expect(await tab.locator("tbody tr").count()).toBeGreaterThanOrEqual(4)
    await expect(tab.locator("tbody").textContent()).resolves.toContain("Done")
    await scan(tab, "runs")
    await shoot(tab, "runs")
    await visit(tab, "sessions", "Sessions")
    await tab.getByRole("link", { name: "console-deny" }).waitFor()
    await tab.getByLabel("Search").fill("grant")
    await tab.getByRole("link", { name: "console-grant" }).waitFor()
    expect(await tab.locator("tbody tr").count()).toBe(1)
    await scan(tab, "sessions")
    await shoot(tab, "sessions")
    await visit(tab, "journal", "Journal")
    await tab.getByRole("button", { name: "Verify the journal" }).click()
    await expect(tab.getByTestId("verify-result").textContent()).resolves.toMatch(/^Intact: \d+ events checked\.$/)
    await scan(tab, "journal")
    await shoot(tab, "journal")
  })

  it("is usable by keyboard: skip link, then the navigation, visible focus, only real controls focusable", async () => {
    await visit(tab, "approvals", "Approvals")
    // The skip link is the first control in document order…
    expect(
      await tab.evaluate(`[...document.querySelectorAll("a[href], button, input, select, textarea, summary")]
        .find((e) => e.tabIndex >= 0 && !e.disabled)?.textContent`)
    ).toBe("Skip to content")
    // …and the keyboard walk starts there. (Starting from the page instead would race the app moving
    // focus to the page's heading once it has rendered, which is what it should do for a new page.)
    await tab.locator("a.skip").focus()
    expect(await tab.evaluate("document.activeElement?.textContent")).toBe("Skip to content")
    await tab.keyboard.press("Tab")
    await tab.keyboard.press("Tab")
    expect(await tab.evaluate("document.activeElement?.textContent")).toBe("Sessions")
    // Focus is visible: the focused link draws an outline.
    expect(await tab.evaluate("getComputedStyle(document.activeElement).outlineStyle")).not.toBe("none")
    await tab.keyboard.press("Enter")
    await tab.getByRole("heading", { level: 1, name: "Sessions" }).waitFor()
    // Nothing but real controls is in the tab order (no clickable divs made focusable).
    const odd = await tab.evaluate(`[...document.querySelectorAll("[tabindex]")]
      .filter((e) => e.tabIndex >= 0 && !["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY"].includes(e.tagName))
      .map((e) => e.tagName)`)
    expect(odd).toEqual([])
  })

  it("signs out: the other tab is sent back to sign-in on its next request", async () => {
    await tab.getByRole("button", { name: "Sign out" }).click()
    await tab.getByText("Signed out.").waitFor()
    await tab.getByLabel("Token").waitFor()
    await visit(other, "grants", "Palyra console").catch(async () => {
      await other.getByLabel("Token").waitFor()
    })
    await other.getByLabel("Token").waitFor()
    expect(problems).toEqual([])
  })
})

describe.skipIf(!hasChromium)("an expired console session", () => {
  it("sends the page back to sign-in with a notice", async () => {
    const dir = fresh("palyra-console-expiry-")
    writeFileSync(join(dir, "palyra.toml"), "[console]\nsession_idle_seconds = 1\n")
    const [short, own] = await Promise.all([startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" }), launch()])
    try {
      const page = watch(await own.newPage(), "expiry")
      await page.goto(short.url)
      await page.getByLabel("Token").fill(short.token)
      await page.getByRole("button", { name: "Sign in" }).click()
      await page.getByRole("heading", { level: 1, name: "Approvals" }).waitFor()
      await new Promise((r) => setTimeout(r, 1500))
      await page.getByRole("link", { name: "Grants" }).click()
      await page.getByText("Your session expired. Sign in again.").waitFor()
      await page.getByLabel("Token").waitFor()
      expect(problems).toEqual([])
    } finally {
      await own.close()
      stopDaemons()
    }
  }, 30_000)
})

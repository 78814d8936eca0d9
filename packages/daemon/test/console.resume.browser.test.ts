/**
 * The session view resumes after a dropped connection. The browser reaches palyrad through a
 * small TCP relay on 127.0.0.1 that the test cuts (every open connection destroyed, new ones
 * refused) and restores, so the tape's SSE stream really breaks; runs made while it is down must
 * appear once it is back (`EventSource` reconnects with `Last-Event-ID`), in tape order, with no
 * gap and no duplicate.
 */

import type { AddressInfo } from "node:net"
import { connect, createServer, type Server, type Socket } from "node:net"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { EXPECTED_401, EXPECTED_409, hasChromium, launch, poll, scan, signIn, visit, watch } from "./console.support.js"
import { type Daemon, fresh, startDaemon, stopDaemons } from "./support.js"

/** A TCP relay to `target` that can be cut (all connections dropped, new ones refused) and restored. */
const relay = async (target: URL) => {
  const open = new Set<Socket>()
  let down = false
  const server: Server = createServer((client) => {
    if (down) return client.destroy()
    const upstream = connect(Number(target.port), target.hostname)
    open.add(client).add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      open.delete(client)
      open.delete(upstream)
    }
    client.on("error", drop).on("close", drop)
    upstream.on("error", drop).on("close", drop)
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut: () => {
      down = true
      for (const s of open) s.destroy()
      open.clear()
    },
    restore: () => {
      down = false
    },
    close: () => server.close()
  }
}

let daemon: Daemon
let proxy: Awaited<ReturnType<typeof relay>>
let browser: Browser
let tab: Page
const problems: Array<string> = []
const received: Array<{ readonly id: string; readonly name: string }> = []

// biome-ignore lint/suspicious/noExplicitAny: JSON from the API, checked field by field
type Json = any
const api = async (path: string, body?: unknown): Promise<Json> => {
  const response = await fetch(`${daemon.url}${path}`, {
    ...(body === undefined ? {} : { method: "POST", body: JSON.stringify(body) }),
    headers: { authorization: `Bearer ${daemon.token}`, "content-type": "application/json" }
  })
  return response.json()
}
const runToEnd = async (text: string, sessionId: string) => {
  const { runId } = await api("/v1/runs", { text, sessionId })
  await poll(
    () => api(`/v1/runs/${runId}`),
    (r: Json) => r.state === "Done",
    `run ${runId} to finish`
  )
}

describe.skipIf(!hasChromium)("the session view after a dropped connection", () => {
  beforeAll(async () => {
    ;[daemon, browser] = await Promise.all([
      startDaemon(fresh("palyra-console-resume-"), ["--port", "0"], { PALYRA_GRPC_PORT: "0" }),
      launch()
    ])
    proxy = await relay(new URL(daemon.url))
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    context.setDefaultTimeout(30_000)
    // While the relay is down chromium logs the refused stream reconnections (net::ERR_…): expected here.
    tab = watch(
      await context.newPage(),
      "resume",
      problems,
      (t) => t === EXPECTED_401 || t === EXPECTED_409 || t.includes("net::ERR_")
    )
    // Every SSE message the page receives, as chromium's DevTools protocol reports it.
    const cdp = await context.newCDPSession(tab)
    await cdp.send("Network.enable")
    cdp.on("Network.eventSourceMessageReceived", (m) => received.push({ id: m.eventId, name: m.eventName }))
    await signIn(tab, proxy.url, daemon.token)
  }, 90_000)
  afterAll(async () => {
    await browser?.close()
    proxy?.close()
    stopDaemons()
  })

  it("continues the tape without gap or duplicate once the connection is back", async () => {
    const { sessionId } = await api("/v1/runs", { text: "what time is it", sessionKey: "console-resume" })
    await visit(tab, proxy.url, `sessions/${sessionId}`, "console-resume")
    await tab.locator("li.tool").filter({ hasText: "time.now" }).getByText("ok", { exact: true }).waitFor()

    proxy.cut()
    await tab.getByText("reconnecting…").waitFor()
    // Two more runs while the page cannot hear anything.
    await runToEnd("and what time is it now", sessionId)
    await runToEnd("hello while you were away", sessionId)
    expect(await tab.locator("li.msg.user").count()).toBe(1)
    proxy.restore()

    await tab.locator("li.msg.user").filter({ hasText: "hello while you were away" }).waitFor()
    await tab.getByText("reconnecting…").waitFor({ state: "detached" })
    // Let anything late arrive, then compare the page with the tape itself.
    await new Promise((r) => setTimeout(r, 500))
    const tape: Array<Json> = await api(`/v1/sessions/${sessionId}/tape?limit=5000`)
    const users = tape.filter((e) => e._tag === "UserMessage").map((e) => e.text)
    const tools = tape.filter((e) => e._tag === "ToolProposed")
    const answers = tape.filter((e) => e._tag === "AssistantMessage" && e.text !== "").map((e) => e.text)
    expect(users).toEqual(["what time is it", "and what time is it now", "hello while you were away"])
    expect(await tab.locator("li.msg.user p").allTextContents()).toEqual(users)
    expect(await tab.locator("li.tool").count()).toBe(tools.length)
    expect(await tab.locator("li.tool .result").count()).toBe(tools.length)
    expect(await tab.locator("li.msg.assistant p").allTextContents()).toEqual(answers)
    // Every item once, in tape order.
    const seqs = await tab
      .locator("ol.tape > li")
      .evaluateAll((items) => items.map((i) => Number(i.getAttribute("data-seq"))))
    expect(seqs).toEqual([...new Set(seqs)].sort((a, b) => a - b))
    // Over the wire too: no tape event was sent to the page twice (by event id).
    const ids = received.filter((m) => m.name !== "ready" && m.id !== "").map((m) => m.id)
    expect(ids.length).toBeGreaterThanOrEqual(seqs.length)
    expect(new Set(ids).size).toBe(ids.length)
    await scan(tab, "session-resumed")
    expect(problems).toEqual([])
  }, 90_000)
})

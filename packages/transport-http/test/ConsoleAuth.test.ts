/**
 * Console sign-in over a real server on 127.0.0.1: a token becomes an HttpOnly, SameSite=Strict
 * session cookie plus a CSRF token; the cookie authenticates like the bearer token; state changes
 * need the CSRF token and a same-origin request; a read never carries the CSRF token, which only a
 * same-origin browser request gets back; sessions are capped per principal (never evicting others)
 * and expire, and sign-out ends them. The live
 * approval inbox (`GET /v1/approvals/events`) streams new and resolved approvals to each tab.
 */
import { ScriptedModel, Tool } from "@palyra/core"
import { Effect, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Sse } from "../src/index.js"
import { ALICE, BOB, json, startServer, type TestServer } from "./fixtures.js"

const write = Tool.make("fs.write", {
  description: "write",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: () => Effect.void
})
const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  if (last?.role === "tool") return { text: "Wrote it." }
  if (last?.role === "user" && last.text.includes("write"))
    return { toolCalls: [{ name: "fs.write", args: { path: "a" } }] }
  return { text: "Hello." }
})

let server: TestServer
let short: TestServer
let capped: TestServer
let tiny: TestServer
beforeAll(async () => {
  server = await startServer({ model, tools: [write], gateway: { requireApprovalChannel: false } })
  short = await startServer({ model, serve: { cookieSessions: { idleSeconds: 1, absoluteSeconds: 60 } } })
  capped = await startServer({ model })
  tiny = await startServer({ model, serve: { cookieSessions: { maxSessions: 2, maxSessionsPerPrincipal: 1 } } })
})
afterAll(async () => {
  await server.close()
  await short.close()
  await capped.close()
  await tiny.close()
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const signIn = async (base: string, token: string, headers: Record<string, string> = {}) => {
  const response = await fetch(`${base}/v1/auth/session`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ token })
  })
  const setCookie = response.headers.get("set-cookie")
  const cookie = setCookie?.split(";", 1)[0] ?? ""
  return { response, setCookie, cookie, body: response.status === 201 ? await json(response) : await json(response) }
}

describe("console sign-in", () => {
  it("exchanges a token for an HttpOnly, SameSite=Strict, opaque cookie and a CSRF token", async () => {
    const { response, setCookie, cookie, body } = await signIn(server.base, "alice-token")
    expect(response.status).toBe(201)
    expect(setCookie).toMatch(/^palyra_session=[A-Za-z0-9_-]{43};/)
    expect(setCookie).toMatch(/HttpOnly/i)
    expect(setCookie).toMatch(/SameSite=Strict/i)
    expect(setCookie).toMatch(/Path=\//)
    expect(setCookie).not.toMatch(/Secure/i)
    expect(setCookie).not.toContain("alice-token")
    expect(body).toMatchObject({ principal: "alice", operator: false })
    expect(body.csrfToken).toMatch(/^[A-Za-z0-9_-]{43}$/)
    // The cookie authenticates like the token, as the same caller; a read never carries the CSRF token.
    const mine = await fetch(`${server.base}/v1/auth/session`, { headers: { cookie } })
    expect(mine.status).toBe(200)
    const text = await mine.text()
    expect(text).not.toContain(body.csrfToken)
    expect(JSON.parse(text)).toEqual({
      principal: "alice",
      operator: false,
      expiresAt: body.expiresAt,
      idleExpiresAt: expect.any(Number)
    })
    const list = await fetch(`${server.base}/v1/sessions`, { headers: { cookie } })
    expect(list.status).toBe(200)
    // Behind TLS the cookie is Secure.
    const tls = await signIn(server.base, "alice-token", { "x-forwarded-proto": "https" })
    expect(tls.setCookie).toMatch(/; Secure/i)
  })

  it("answers a bad token 401 and sets no cookie", async () => {
    const { response, setCookie, body } = await signIn(server.base, "not-a-token")
    expect(response.status).toBe(401)
    expect(setCookie).toBeNull()
    expect(body).toEqual({ code: "unauthenticated", message: "invalid token" })
    const none = await fetch(`${server.base}/v1/auth/session`)
    expect(none.status).toBe(401)
    const forged = await fetch(`${server.base}/v1/sessions`, { headers: { cookie: "palyra_session=forged" } })
    expect(forged.status).toBe(401)
  })

  it("refuses a cookie-authenticated change without the right CSRF token or from another origin", async () => {
    const { cookie, body } = await signIn(server.base, "alice-token")
    const create = (headers: Record<string, string>) =>
      fetch(`${server.base}/v1/sessions`, {
        method: "POST",
        headers: { cookie, "content-type": "application/json", ...headers },
        body: JSON.stringify({ sessionKey: "console-csrf" })
      })
    const missing = await create({})
    expect(missing.status).toBe(403)
    expect(await json(missing)).toEqual({ code: "permission_denied", message: "missing x-csrf-token header" })
    // One character changed (never to itself: a token ending in "A" would otherwise stay valid).
    const last = body.csrfToken.endsWith("A") ? "B" : "A"
    const wrong = await create({ "x-csrf-token": `${body.csrfToken.slice(0, -1)}${last}` })
    expect(wrong.status).toBe(403)
    const crossOrigin = await create({ "x-csrf-token": body.csrfToken, origin: "http://evil.example" })
    expect(crossOrigin.status).toBe(403)
    expect((await json(crossOrigin)).message).toBe("cross-origin request")
    const crossSite = await create({ "x-csrf-token": body.csrfToken, "sec-fetch-site": "cross-site" })
    expect(crossSite.status).toBe(403)
    const signInFromElsewhere = await signIn(server.base, "alice-token", { origin: "http://evil.example" })
    expect(signInFromElsewhere.response.status).toBe(403)
    expect(signInFromElsewhere.setCookie).toBeNull()
    // Nothing was created by the refused requests.
    const before = (await json(await fetch(`${server.base}/v1/sessions`, { headers: ALICE }))) as Array<{
      key: string | null
    }>
    expect(before.some((s) => s.key === "console-csrf")).toBe(false)
    const host = new URL(server.base).host
    const ok = await create({ "x-csrf-token": body.csrfToken, origin: `http://${host}` })
    expect(ok.status).toBe(201)
    expect((await json(ok)).principal).toBe("alice")
    // A bearer request needs no CSRF token, exactly as before.
    const bearer = await fetch(`${server.base}/v1/sessions`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ sessionKey: "console-bearer" })
    })
    expect(bearer.status).toBe(201)
  })

  it("signs out: the cookie is cleared and no longer authenticates", async () => {
    const { cookie, body } = await signIn(server.base, "alice-token")
    const noCsrf = await fetch(`${server.base}/v1/auth/session`, { method: "DELETE", headers: { cookie } })
    expect(noCsrf.status).toBe(403)
    const out = await fetch(`${server.base}/v1/auth/session`, {
      method: "DELETE",
      headers: { cookie, "x-csrf-token": body.csrfToken }
    })
    expect(out.status).toBe(204)
    expect(out.headers.get("set-cookie")).toMatch(/^palyra_session=; Max-Age=0/)
    expect((await fetch(`${server.base}/v1/sessions`, { headers: { cookie } })).status).toBe(401)
    expect((await fetch(`${server.base}/v1/auth/session`, { headers: { cookie } })).status).toBe(401)
  })

  it("gives the CSRF token back only to a same-origin browser request with the cookie", async () => {
    const { cookie, body } = await signIn(server.base, "alice-token")
    const host = new URL(server.base).host
    const reissue = (headers: Record<string, string>) =>
      fetch(`${server.base}/v1/auth/session/csrf`, { method: "POST", headers })
    const sameOrigin = { "sec-fetch-site": "same-origin", origin: `http://${host}` }
    // A plain server-side replay of the cookie (no Fetch Metadata) is refused.
    const bare = await reissue({ cookie })
    expect(bare.status).toBe(403)
    expect(await json(bare)).toEqual({ code: "permission_denied", message: "needs Sec-Fetch-Site: same-origin" })
    // What a browser sends for a page on another port of this host: same-site, its own Origin.
    const otherPort = await reissue({ cookie, "sec-fetch-site": "same-site", origin: "http://127.0.0.1:5173" })
    expect(otherPort.status).toBe(403)
    const foreign = await reissue({ cookie, "sec-fetch-site": "same-origin", origin: "http://127.0.0.1:5173" })
    expect(foreign.status).toBe(403)
    expect((await json(foreign)).message).toBe("cross-origin request")
    const noOrigin = await reissue({ cookie, "sec-fetch-site": "same-origin" })
    expect(noOrigin.status).toBe(403)
    for (const refused of [bare, otherPort, foreign, noOrigin]) expect(refused.headers.get("set-cookie")).toBeNull()
    // Without a live cookie, same-origin headers alone get nothing.
    expect((await reissue(sameOrigin)).status).toBe(401)
    expect((await reissue({ ...sameOrigin, cookie: "palyra_session=forged" })).status).toBe(401)
    // The page's own same-origin request gets the session's token, and it works.
    const ok = await reissue({ ...sameOrigin, cookie })
    expect(ok.status).toBe(200)
    const again = await json(ok)
    expect(again).toMatchObject({ principal: "alice", operator: false, csrfToken: body.csrfToken })
    const created = await fetch(`${server.base}/v1/sessions`, {
      method: "POST",
      headers: { cookie, "content-type": "application/json", "x-csrf-token": again.csrfToken, ...sameOrigin },
      body: JSON.stringify({ sessionKey: "console-reissued" })
    })
    expect(created.status).toBe(201)
  })

  it("caps sessions per principal: bob signing in over and over never signs alice out", async () => {
    const alice = await signIn(capped.base, "alice-token")
    const bobs: Array<string> = []
    for (let i = 0; i < 1001; i++) {
      const bob = await signIn(capped.base, "bob-token")
      expect(bob.response.status).toBe(201)
      bobs.push(bob.cookie)
    }
    expect((await fetch(`${capped.base}/v1/sessions`, { headers: { cookie: alice.cookie } })).status).toBe(200)
    // Bob keeps his newest 20; his older ones are gone.
    const live = async (cookie: string) =>
      (await fetch(`${capped.base}/v1/auth/session`, { headers: { cookie } })).status === 200
    expect(await live(bobs[1000] ?? "")).toBe(true)
    expect(await live(bobs[981] ?? "")).toBe(true)
    expect(await live(bobs[980] ?? "")).toBe(false)
    expect(await live(bobs[0] ?? "")).toBe(false)
  }, 120_000) // a thousand sign-ins: ~3 s alone, over 30 s on a loaded 2-core machine

  it("refuses new sign-ins at the global cap instead of evicting anyone", async () => {
    const first = await signIn(tiny.base, "alice-token")
    const second = await signIn(tiny.base, "bob-token")
    expect(second.response.status).toBe(201)
    const third = await signIn(tiny.base, "operator-token")
    expect(third.response.status).toBe(429)
    expect(third.setCookie).toBeNull()
    expect(third.body.code).toBe("budget_exceeded")
    for (const held of [first, second])
      expect((await fetch(`${tiny.base}/v1/auth/session`, { headers: { cookie: held.cookie } })).status).toBe(200)
    // Within its own quota a principal still signs in: its oldest session makes room.
    const replaced = await signIn(tiny.base, "alice-token")
    expect(replaced.response.status).toBe(201)
    expect((await fetch(`${tiny.base}/v1/auth/session`, { headers: { cookie: first.cookie } })).status).toBe(401)
  })

  it("expires an idle session", async () => {
    const { cookie } = await signIn(short.base, "alice-token")
    expect((await fetch(`${short.base}/v1/sessions`, { headers: { cookie } })).status).toBe(200)
    await sleep(1200)
    const expired = await fetch(`${short.base}/v1/sessions`, { headers: { cookie } })
    expect(expired.status).toBe(401)
    expect(await json(expired)).toEqual({ code: "unauthenticated", message: "session expired; sign in again" })
  })
})

describe("GET /v1/approvals/events", () => {
  it("streams new approvals to every tab of their owner, then their resolution; others see nothing", async () => {
    const { cookie } = await signIn(server.base, "alice-token")
    const open = async (headers: Record<string, string>) => {
      const controller = new AbortController()
      const response = await fetch(`${server.base}/v1/approvals/events`, { headers, signal: controller.signal })
      expect(response.status).toBe(200)
      expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
      const events: Array<{ event: string; status: string; id: string }> = []
      const reading = (async () => {
        try {
          for await (const frame of Sse.fromResponse(response)) {
            if (frame.event === "ready") continue
            const record = JSON.parse(frame.data)
            events.push({ event: frame.event ?? "", status: record.status, id: record.id })
          }
        } catch {
          // aborted
        }
      })()
      const close = () => {
        controller.abort()
        return reading
      }
      return { events, close }
    }
    const tab1 = await open({ cookie })
    const tab2 = await open(ALICE)
    const bob = await open(BOB)
    await sleep(50)
    const accepted = await fetch(`${server.base}/v1/runs`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "please write", sessionKey: "inbox" })
    })
    expect(accepted.status).toBe(202)
    const waitFor = async (check: () => boolean) => {
      for (let i = 0; i < 100 && !check(); i++) await sleep(20)
      expect(check()).toBe(true)
    }
    await waitFor(() => tab1.events.length >= 1 && tab2.events.length >= 1)
    const [requested] = tab1.events
    expect(requested).toMatchObject({ event: "requested", status: "pending" })
    expect(tab2.events[0]).toEqual(requested)
    const resolved = await fetch(`${server.base}/v1/approvals/${requested?.id}`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ decision: "deny" })
    })
    expect(resolved.status).toBe(200)
    await waitFor(() => tab1.events.length >= 2 && tab2.events.length >= 2)
    expect(tab1.events[1]).toEqual({ event: "resolved", status: "denied", id: requested?.id })
    expect(tab2.events[1]).toEqual(tab1.events[1])
    // A run cancelled while it waits closes its approval: the inboxes hear of it too.
    const second = await fetch(`${server.base}/v1/runs`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "please write again", sessionKey: "inbox" })
    })
    const { runId } = await json(second)
    await waitFor(() => tab1.events.length >= 3)
    expect(tab1.events[2]).toMatchObject({ event: "requested", status: "pending" })
    expect((await fetch(`${server.base}/v1/runs/${runId}/cancel`, { method: "POST", headers: ALICE })).status).toBe(200)
    await waitFor(() => tab2.events.length >= 4)
    expect(tab2.events[3]).toEqual({ event: "resolved", status: "expired", id: tab1.events[2]?.id })
    expect(bob.events).toEqual([])
    await Promise.all([tab1.close(), tab2.close(), bob.close()])
    // Without a token or cookie: 401.
    expect((await fetch(`${server.base}/v1/approvals/events`)).status).toBe(401)
  })
})

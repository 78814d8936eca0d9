/**
 * Cedar on first use: a palyrad on the built-in policies does not load cedar-wasm before it is
 * ready (its CommonJS body compiles a 4 MB wasm module), and its first tool call loads it and is
 * decided by the built-in policies; a policies folder is still read, validated and installed at
 * start, so a bad policy still fails the start. A resolve hook (`module.registerHooks`, preloaded
 * with `--import`) appends every resolution of the cedar-wasm package to a file; the policies-folder
 * start is the control that shows the hook sees it.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { CedarPolicy } from "@palyra/core/cedar"
import { afterEach, expect, it } from "vitest"
import { fresh, startDaemon, stopDaemons } from "./support.js"

afterEach(stopDaemons)

const ports = "[server]\nhttp_port = 0\ngrpc_port = 0\n"

/**
 * A data dir whose palyrad records each load of the cedar-wasm package in `seen` (a load hook: a
 * path lookup of the package is not a load); `broken` makes the hook refuse to find it (`resolve`) or
 * to load it (`load`), as a damaged install would.
 */
const withHook = (toml: string, broken?: "resolve" | "load") => {
  const dir = fresh("palyra-lazy-cedar-")
  const seen = join(dir, "cedar-loads.txt")
  const hook = join(dir, "hook.mjs")
  writeFileSync(
    hook,
    `import { appendFileSync } from "node:fs"
import { registerHooks } from "node:module"
const broken = ${JSON.stringify(broken ?? null)}
registerHooks({
  resolve(specifier, context, next) {
    if (broken === "resolve" && specifier.includes("cedar-wasm")) throw new Error("hook: no cedar-wasm here")
    return next(specifier, context)
  },
  load(url, context, next) {
    if (url.includes("cedar-wasm")) {
      if (broken === "load") throw new Error("hook: cedar-wasm is damaged")
      appendFileSync(${JSON.stringify(seen)}, url + "\\n")
    }
    return next(url, context)
  }
})
`
  )
  writeFileSync(join(dir, "palyra.toml"), toml)
  return { dir, seen, env: { NODE_OPTIONS: `--import ${pathToFileURL(hook).href}` } }
}

/** Asks palyrad "what time is it" (the demo agent calls time.now), waits for the run's end: its state and tape. */
const timeRun = async (d: { url: string; token: string }, sessionKey: string) => {
  const headers = { authorization: `Bearer ${d.token}`, "content-type": "application/json" }
  const sent = (await (
    await fetch(`${d.url}/v1/runs`, {
      method: "POST",
      headers,
      body: JSON.stringify({ text: "what time is it", sessionKey })
    })
  ).json()) as { runId: string; sessionId: string }
  let state = ""
  for (let i = 0; i < 300 && state !== "Done" && state !== "Failed"; i++) {
    await new Promise((r) => setTimeout(r, 50))
    state = ((await (await fetch(`${d.url}/v1/runs/${sent.runId}`, { headers })).json()) as { state: string }).state
  }
  const tape = (await (await fetch(`${d.url}/v1/sessions/${sent.sessionId}/tape`, { headers })).json()) as Array<{
    _tag: string
    decision?: string
    policyIds?: ReadonlyArray<string>
  }>
  return { state, tape }
}

it("on the built-in policies, cedar-wasm loads at the first tool call, not at start, and decides it", async () => {
  const { dir, seen, env } = withHook(ports)
  const d = await startDaemon(dir, [], env)
  const ready = await fetch(`${d.url}/readyz`)
  expect(ready.status).toBe(200)
  expect(existsSync(seen)).toBe(false)
  // The demo agent answers "what time is it" with a call of time.now (low risk: allowed by the built-ins).
  const { state, tape } = await timeRun(d, "lazy-cedar")
  expect(state).toBe("Done")
  const decided = tape.filter((e) => e._tag === "PolicyDecided")
  expect(decided).toHaveLength(1)
  expect(decided[0]).toMatchObject({ decision: "allow", policyIds: ["default.low-risk-allowed"] })
  expect(readFileSync(seen, "utf8")).toMatch(/cedar-wasm/)
}, 60_000)

it("a policies folder is still installed at start (control), and a bad policy in it fails the start", async () => {
  const good = withHook(`policies_dir = "policies"\n${ports}`)
  mkdirSync(join(good.dir, "policies"))
  // (Not the built-ins' exact text, which the engine knows to be valid and installs on first use.)
  writeFileSync(join(good.dir, "policies", "base.cedar"), `${CedarPolicy.defaultPolicies}\n// the site's copy\n`)
  await startDaemon(good.dir, [], good.env)
  expect(readFileSync(good.seen, "utf8")).toMatch(/cedar-wasm/)

  const bad = withHook(`policies_dir = "policies"\n${ports}`)
  mkdirSync(join(bad.dir, "policies"))
  writeFileSync(
    join(bad.dir, "policies", "base.cedar"),
    `${CedarPolicy.defaultPolicies}\npermit (principal, action == Palyra::Action::"tool.explode", resource);\n`
  )
  const failed = await startDaemon(bad.dir, [], bad.env).then(
    () => undefined,
    (e: Error) => e
  )
  expect(failed?.message).toMatch(/exited 1[\s\S]*policy set rejected[\s\S]*tool\.explode/)
}, 60_000)

it("a cedar-wasm that cannot be found fails the start; one that cannot load fails the tool call's run, never allows it", async () => {
  const missing = withHook(ports, "resolve")
  const failed = await startDaemon(missing.dir, [], missing.env).then(
    () => undefined,
    (e: Error) => e
  )
  expect(failed?.message).toMatch(/exited 1[\s\S]*cannot find Cedar/)

  const damaged = withHook(ports, "load")
  const d = await startDaemon(damaged.dir, [], damaged.env)
  expect((await fetch(`${d.url}/readyz`)).status).toBe(200)
  const { state, tape } = await timeRun(d, "damaged-cedar")
  expect(state).toBe("Failed")
  expect(tape.filter((e) => e._tag === "PolicyDecided" && e.decision === "allow")).toEqual([])
  expect(tape.map((e) => e._tag)).not.toContain("ToolStarted")
  expect(tape.map((e) => e._tag)).not.toContain("ToolResult")
}, 60_000)

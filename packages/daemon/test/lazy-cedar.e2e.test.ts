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

/** A data dir whose palyrad records each resolution of cedar-wasm in `seen`. */
const withHook = (toml: string) => {
  const dir = fresh("palyra-lazy-cedar-")
  const seen = join(dir, "cedar-resolutions.txt")
  const hook = join(dir, "hook.mjs")
  writeFileSync(
    hook,
    `import { appendFileSync } from "node:fs"
import { registerHooks } from "node:module"
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context)
    if (resolved.url.includes("cedar-wasm")) appendFileSync(${JSON.stringify(seen)}, resolved.url + "\\n")
    return resolved
  }
})
`
  )
  writeFileSync(join(dir, "palyra.toml"), toml)
  return { dir, seen, env: { NODE_OPTIONS: `--import ${pathToFileURL(hook).href}` } }
}

it("on the built-in policies, cedar-wasm loads at the first tool call, not at start, and decides it", async () => {
  const { dir, seen, env } = withHook(ports)
  const d = await startDaemon(dir, [], env)
  const ready = await fetch(`${d.url}/readyz`)
  expect(ready.status).toBe(200)
  expect(existsSync(seen)).toBe(false)
  const headers = { authorization: `Bearer ${d.token}`, "content-type": "application/json" }
  // The demo agent answers "what time is it" with a call of time.now (low risk: allowed by the built-ins).
  const sent = (await (
    await fetch(`${d.url}/v1/runs`, {
      method: "POST",
      headers,
      body: JSON.stringify({ text: "what time is it", sessionKey: "lazy-cedar" })
    })
  ).json()) as { runId: string; sessionId: string }
  let state = ""
  for (let i = 0; i < 300 && state !== "Done" && state !== "Failed"; i++) {
    await new Promise((r) => setTimeout(r, 50))
    state = ((await (await fetch(`${d.url}/v1/runs/${sent.runId}`, { headers })).json()) as { state: string }).state
  }
  expect(state).toBe("Done")
  const tape = (await (await fetch(`${d.url}/v1/sessions/${sent.sessionId}/tape`, { headers })).json()) as Array<{
    _tag: string
    decision?: string
    policyIds?: ReadonlyArray<string>
  }>
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

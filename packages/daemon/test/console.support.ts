/**
 * Shared by the web console's browser tests: Debian's chromium (never a downloaded browser), the
 * axe-core scan in light and dark, screenshots at desktop and 360 px into `artifacts/console/`
 * (git-ignored), a console-error watcher, sign-in, and polling with a real delay.
 */
import { existsSync, mkdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { chromium, type Page } from "playwright-core"
import { expect } from "vitest"
import { consoleAssetsDir } from "../src/internal/consoleAssets.js"

export const CHROMIUM = "/usr/bin/chromium"
export const hasChromium = existsSync(CHROMIUM)
const built = existsSync(join(consoleAssetsDir() ?? "/nonexistent", "index.html"))
if (!hasChromium) {
  console.warn(
    "\n[palyra] SKIPPING the web console browser tests: /usr/bin/chromium is missing (apt-get install -y chromium).\n"
  )
}
if (hasChromium && !built) throw new Error("the console is not built: run `pnpm --filter @palyra/console build`")

const here = dirname(fileURLToPath(import.meta.url))
export const artifacts = join(here, "..", "..", "..", "artifacts", "console")
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8")

export const launch = () => chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] })

/**
 * Chromium's own network line for a 401 a test provokes on purpose (a refused token, a request
 * after sign-out, the session check on the sign-in page): the browser logs those for any error status.
 */
export const EXPECTED_401 = "Failed to load resource: the server responded with a status of 401 (Unauthorized)"
/** The same line for the Pairing page's probe on a daemon without channels ("channels are not configured"). */
export const EXPECTED_409 = "Failed to load resource: the server responded with a status of 409 (Conflict)"

/** Collects every console error or warning and uncaught page error not `allowed` into `problems`. */
export const watch = (
  page: Page,
  name: string,
  problems: Array<string>,
  allowed: (text: string) => boolean = (text) => text === EXPECTED_401 || text === EXPECTED_409
) => {
  page.on("console", (message) => {
    if ((message.type() === "error" || message.type() === "warning") && !allowed(message.text()))
      problems.push(`${name}: ${message.text()}`)
  })
  page.on("pageerror", (error) => problems.push(`${name}: ${error.message}`))
  return page
}

export const poll = async <A>(read: () => Promise<A>, until: (a: A) => boolean, what: string): Promise<A> => {
  for (let i = 0; i < 300; i++) {
    const value = await read()
    if (until(value)) return value
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`timed out waiting for ${what}`)
}

/** axe-core in the page (evaluated over the DevTools protocol, so the page's CSP stays strict). */
export const scan = async (page: Page, name: string) => {
  await page.evaluate(axeSource)
  // In the light and the dark theme (colour contrast differs).
  for (const colorScheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme })
    // A string, evaluated in the page: `axe` and `document` are the page's globals.
    const violations = (await page.evaluate(`axe.run(document, { resultTypes: ["violations"] }).then((r) =>
      r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length })))`)) as Array<{
      id: string
      impact: string
      help: string
      nodes: number
    }>
    const bad = violations.filter((v) => v.impact === "serious" || v.impact === "critical")
    expect(bad, `${name} (${colorScheme}): ${JSON.stringify(bad)}`).toEqual([])
  }
  mkdirSync(artifacts, { recursive: true })
  await page.screenshot({ path: join(artifacts, `${name}-dark.png`), fullPage: true })
  await page.emulateMedia({ colorScheme: "light" })
}

/** Screenshots at desktop and 360 px wide; nothing scrolls sideways at 360 px but the tables' own boxes. */
export const shoot = async (page: Page, name: string) => {
  mkdirSync(artifacts, { recursive: true })
  await page.setViewportSize({ width: 1280, height: 800 })
  await page.screenshot({ path: join(artifacts, `${name}-desktop.png`), fullPage: true })
  await page.setViewportSize({ width: 360, height: 740 })
  await page.screenshot({ path: join(artifacts, `${name}-360.png`), fullPage: true })
  const overflow = Number(
    await page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
  )
  expect(overflow, `${name} is wider than 360 px`).toBeLessThanOrEqual(0)
  await page.setViewportSize({ width: 1280, height: 800 })
}

/** Open a page by its route (reloading when already there: a hash-only navigation would not). */
export const visit = async (page: Page, base: string, route: string, heading: string | RegExp) => {
  const target = `${base}/#/${route}`
  if (page.url() === target) await page.reload()
  else await page.goto(target)
  await page.getByRole("heading", { level: 1, name: heading }).waitFor()
}

export const signIn = async (page: Page, base: string, token: string) => {
  await page.goto(base)
  await page.getByLabel("Token").fill(token)
  await page.getByRole("button", { name: "Sign in" }).click()
  await page.getByRole("heading", { level: 1, name: "Approvals" }).waitFor()
}

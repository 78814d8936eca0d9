/**
 * Importing `@palyra/core` (as built and published) loads only the kernel: neither Cedar's wasm nor
 * the AI SDK, which embedders and the demo daemon should not pay for. A loader hook records every
 * module the import resolves; the Cedar entry point is the control that shows the hook sees them
 * (cedar-wasm itself loads at an engine's first use, so the control builds one on its own policies).
 */
import { spawnSync } from "node:child_process"
import { dirname } from "node:path"
import { fileURLToPath } from "node:url"
import { expect, it } from "vitest"

const here = dirname(fileURLToPath(import.meta.url))

const resolvedBy = (specifier: string, then = ""): Array<string> => {
  const script = `
    import { registerHooks } from "node:module"
    const seen = []
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.push(r.url); return r } })
    const loaded = await import(${JSON.stringify(specifier)})
    ${then}
    process.stdout.write(JSON.stringify(seen))
  `
  const out = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: here, encoding: "utf8" })
  expect(out.stderr).toBe("")
  return JSON.parse(out.stdout) as Array<string>
}

const heavy = /cedar-wasm|\/node_modules\/(\.pnpm\/)?ai[@/]|@ai-sdk/

it("import('@palyra/core') loads neither cedar-wasm nor the AI SDK", () => {
  const kernel = resolvedBy("@palyra/core")
  expect(kernel.some((url) => url.includes("/packages/core/dist/"))).toBe(true)
  expect(kernel.filter((url) => heavy.test(url))).toEqual([])
  // Control: the Cedar entry point does load the wasm package, and the hook sees it.
  const engine = `const { Effect } = await import("effect"); Effect.runSync(loaded.CedarPolicy.make({ policies: "forbid (principal, action, resource);" }))`
  expect(resolvedBy("@palyra/core/cedar", engine).some((url) => url.includes("cedar-wasm"))).toBe(true)
})

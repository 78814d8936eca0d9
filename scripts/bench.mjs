#!/usr/bin/env node
// `pnpm bench <name> [--quick]` runs bench/<name>/index.ts on the project toolchain.
// `pnpm bench --all --quick` runs every benchmark once in quick mode (the test command does this so none rots).
import { spawnSync } from "node:child_process"
import { existsSync, readdirSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = dirname(dirname(fileURLToPath(import.meta.url)))
const benchDir = join(root, "bench")
const args = process.argv.slice(2)
const flags = args.filter((a) => a.startsWith("--"))
const names = args.filter((a) => !a.startsWith("--"))
const all = readdirSync(benchDir, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(benchDir, d.name, "index.ts")))
  .map((d) => d.name)
  .sort()
const selected = flags.includes("--all") ? all : names
if (selected.length === 0) {
  console.error(
    `usage: pnpm bench <name> [--quick] | pnpm bench --all [--quick]\nbenchmarks: ${all.join(", ") || "(none yet)"}`
  )
  process.exit(flags.includes("--all") ? 0 : 2)
}
for (const name of selected) {
  if (!all.includes(name)) {
    console.error(`no benchmark named "${name}"; have: ${all.join(", ")}`)
    process.exit(2)
  }
  const passOn = flags.filter((f) => f !== "--all")
  console.error(`\n=== bench ${name} ${passOn.join(" ")}`)
  const { status } = spawnSync(
    process.execPath,
    ["--conditions=@palyra/source", "--import", "tsx", join(benchDir, name, "index.ts"), ...passOn],
    { stdio: "inherit", cwd: benchDir }
  )
  if (status !== 0) {
    console.error(`bench ${name} failed with exit code ${status}`)
    process.exit(status ?? 1)
  }
}

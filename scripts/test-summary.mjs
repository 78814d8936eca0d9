#!/usr/bin/env node
// Sums the vitest JSON reports every package wrote (vitest.shared.ts sets the reporter) and prints
// one closing line for the whole workspace: "tests: N passed, N failed".
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = dirname(dirname(fileURLToPath(import.meta.url)))
const dirs = ["examples", ...readdirSync(join(root, "packages")).map((p) => join("packages", p))]
let passed = 0
let failed = 0
let skipped = 0
for (const dir of dirs) {
  const file = join(root, dir, ".vitest-report.json")
  if (!existsSync(file)) continue
  const report = JSON.parse(readFileSync(file, "utf8"))
  passed += report.numPassedTests ?? 0
  failed += report.numFailedTests ?? 0
  skipped += (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0)
}
console.log(`tests: ${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`)
process.exit(failed > 0 ? 1 : 0)

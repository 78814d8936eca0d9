import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"

/** Compile the AssemblyScript plugins (examples and fixtures) once before the tests; skips fresh ones. */
export default function setup() {
  execFileSync(process.execPath, [fileURLToPath(new URL("../../scripts/build-examples.mjs", import.meta.url))], {
    stdio: "inherit"
  })
}

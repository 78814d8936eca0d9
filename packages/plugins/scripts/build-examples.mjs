// Compiles the AssemblyScript plugins (examples/*, test/fixtures/*) to `plugin.wasm` beside their
// manifests. Runs in the package's `build` and before its tests; a plugin whose sources are older
// than its wasm is skipped. The .wasm files are build output (git-ignored).
import { readdirSync, statSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import asc from "assemblyscript/asc"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const shared = join(root, "examples", "shared")

const newest = (dir) =>
  readdirSync(dir, { withFileTypes: true }).reduce((max, entry) => {
    const path = join(dir, entry.name)
    return Math.max(max, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs)
  }, 0)

const plugins = ["examples", join("test", "fixtures")].flatMap((parent) =>
  readdirSync(join(root, parent), { withFileTypes: true })
    .filter((d) => d.isDirectory() && statSync(join(root, parent, d.name, "assembly"), { throwIfNoEntry: false }))
    .map((d) => join(root, parent, d.name))
)

let failed = false
for (const dir of plugins) {
  const out = join(dir, "plugin.wasm")
  const built = statSync(out, { throwIfNoEntry: false })?.mtimeMs ?? 0
  if (built > Math.max(newest(join(dir, "assembly")), newest(shared))) continue
  const entry = relative(root, join(dir, "assembly", "index.ts"))
  const abort = `${relative(root, join(shared, "palyra")).split("\\").join("/")}/abort`
  const { error, stderr } = await asc.main(
    [entry, "--outFile", relative(root, out), "--optimize", "--use", `abort=${abort}`, "--baseDir", root],
    {}
  )
  if (error) {
    failed = true
    process.stderr.write(`asc ${entry}: ${error.message}\n${stderr.toString()}\n`)
  } else {
    process.stdout.write(`built ${relative(root, out)}\n`)
  }
}
if (failed) process.exit(1)

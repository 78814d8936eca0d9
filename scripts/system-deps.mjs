#!/usr/bin/env node
// System packages the tests need that npm cannot provide: bubblewrap (`bwrap`), for the `os`
// sandbox tier of `shell.exec`, util-linux's `prlimit`, for the `limits` tier, and Debian's
// `chromium`, which the web console's browser tests drive (playwright-core; a browser is never downloaded).
//
// Idempotent and quiet when everything is there. Installs with apt-get only when a tool is missing,
// the machine has apt-get and we run as root; runs `apt-get update` only when the first install
// fails (a stale package index). Otherwise it says what is missing and exits 0: the `os`-tier tests
// then skip with one loud message instead of failing. It never makes the test command fail.
//
// Written for Node >= 18 with no dependencies, on purpose.
import { spawnSync } from "node:child_process"
import { accessSync, constants } from "node:fs"
import { delimiter, join } from "node:path"

const log = (msg) => process.stderr.write(`[palyra] ${msg}\n`)

const onPath = (name) =>
  (process.env.PATH ?? "").split(delimiter).some((dir) => {
    if (dir === "") return false
    try {
      accessSync(join(dir, name), constants.X_OK)
      return true
    } catch {
      return false
    }
  })

// executable -> Debian package that provides it
const wanted = [
  ["bwrap", "bubblewrap"],
  ["prlimit", "util-linux"],
  ["chromium", "chromium"]
]
const missing = wanted.filter(([bin]) => !onPath(bin))
if (missing.length === 0) process.exit(0)

const packages = missing.map(([, pkg]) => pkg)
const names = missing.map(([bin, pkg]) => `${bin} (${pkg})`).join(", ")
const isRoot = typeof process.getuid === "function" && process.getuid() === 0
if (process.platform !== "linux" || !isRoot || !onPath("apt-get")) {
  log(
    `missing ${names}; not installing (${process.platform !== "linux" ? "not Linux" : !isRoot ? "not root" : "no apt-get"}). ` +
      "The sandbox and browser tests that need them will be skipped."
  )
  process.exit(0)
}

const apt = (...args) =>
  spawnSync("apt-get", args, {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  }).status
const install = () => apt("install", "-y", "--no-install-recommends", ...packages)

log(`installing ${names} with apt-get`)
let status = install()
if (status !== 0) {
  log("install failed; refreshing the package index (apt-get update) and trying once more")
  if (apt("update") === 0) status = install()
}
const still = missing.filter(([bin]) => !onPath(bin))
if (status !== 0 || still.length > 0) {
  log(
    `could not install ${still.map(([b]) => b).join(", ") || names}; the sandbox and browser tests that need them will be skipped`
  )
}
process.exit(0)

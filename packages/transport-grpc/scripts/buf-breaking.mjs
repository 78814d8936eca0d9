#!/usr/bin/env node
// `buf breaking` against the previous commit: the wire contract (palyra.v1) must stay compatible.
// Skipped (with a message) where there is no previous commit holding the protos, e.g. the first one.
import { spawnSync } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const buf = join(dirname(fileURLToPath(import.meta.url)), "..", "node_modules", ".bin", "buf")

const git = (...args) => spawnSync("git", args, { encoding: "utf8" })
const top = git("rev-parse", "--show-toplevel").stdout.trim()
const file = "packages/transport-grpc/proto/palyra/v1/gateway.proto"
if (!top || git("cat-file", "-e", `HEAD~1:${file}`).status !== 0) {
  console.log("buf breaking: no previous commit with the protos; nothing to compare")
  process.exit(0)
}
const against = `${top}/.git#ref=HEAD~1,subdir=packages/transport-grpc/proto`
const result = spawnSync(buf, ["breaking", "proto", "--against", against], { stdio: "inherit" })
if (result.status === 0) console.log("buf breaking: compatible with the previous commit")
process.exit(result.status ?? 1)

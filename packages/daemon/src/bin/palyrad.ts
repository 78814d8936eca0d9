#!/usr/bin/env node
// palyrad's entry: turn on Node's on-disk compile cache before loading the daemon, so every start
// after the first skips most parsing and compiling. The daemon itself is in palyrad-main.
import module from "node:module"

module.enableCompileCache?.()
await import("./palyrad-main.js")

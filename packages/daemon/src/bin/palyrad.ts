#!/usr/bin/env -S node --max-semi-space-size=4
// The node flags above (the only place they are set; launchers that run `node palyrad.js` read them
// from this line): a young generation of at most 4 MB per semi-space. V8's default lets it grow to
// tens of MB under a burst of requests, and the pages stay resident afterwards: RSS after 1,500 idle
// sessions were created 323 MB with the default, 170-186 MB with this; live heap is ~35 MB either way.
// palyrad's entry: turn on Node's on-disk compile cache before loading the daemon, so every start
// after the first skips most parsing and compiling. The daemon itself is in palyrad-main.
import module from "node:module"

module.enableCompileCache?.()
await import("./palyrad-main.js")

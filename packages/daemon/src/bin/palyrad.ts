#!/usr/bin/env -S MALLOC_ARENA_MAX=2 node --max-semi-space-size=4
// The node flags above (the only place they are set; launchers that run `node palyrad.js` read them
// from this line): a young generation of at most 4 MB per semi-space. V8's default lets it grow to
// tens of MB under a burst of requests, and the pages stay resident afterwards: RSS after 1,500 idle
// sessions were created 323 MB with the default, 170-186 MB with this; live heap is ~35 MB either way.
// And the environment (launchers that spawn `node palyrad.js` set it from this line too): glibc's
// malloc keeps an arena per thread that allocates (the journal's writer thread, V8's and libuv's
// workers), each holding freed memory resident; after 200 one-message sessions ~32 MB of RSS sat in
// four such arenas. Two arenas shared by every thread return most of it (RSS −15 to −28 MB measured,
// PERF-NOTES round 15). Other C libraries ignore the variable.
// palyrad's entry: turn on Node's on-disk compile cache before loading the daemon, so every start
// after the first skips most parsing and compiling. The daemon itself is in palyrad-main.
import module from "node:module"

module.enableCompileCache?.()
await import("./palyrad-main.js")

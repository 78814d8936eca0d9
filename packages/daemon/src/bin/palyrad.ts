#!/usr/bin/env -S node --max-semi-space-size=4
// The node flags above (the only place they are set; launchers that run `node palyrad.js` read them
// from this line): a young generation of at most 4 MB per semi-space. V8's default lets it grow to
// tens of MB under a burst of requests, and the pages stay resident afterwards: RSS after 1,500 idle
// sessions were created 323 MB with the default, 170-186 MB with this; live heap is ~35 MB either way.
// Only node and its flags here: package managers' bin shims (pnpm's) take the first word after
// `env -S` as the program, so an environment assignment there breaks the installed `palyrad`.
// The environment palyrad should run with (`MALLOC_ARENA_MAX=2`: glibc's per-thread malloc arenas
// held ~32 MB of RSS after 200 sessions, PERF-NOTES round 15) is the launcher's: `pnpm start` and the
// benches set it, and the README's "Running palyrad as a service" says how.
// palyrad's entry: turn on Node's on-disk compile cache before loading the daemon, so every start
// after the first skips most parsing and compiling. The daemon itself is in palyrad-main.
import module from "node:module"

module.enableCompileCache?.()
await import("./palyrad-main.js")

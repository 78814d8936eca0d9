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
// The build writes a cache beside the bundle (`dist/compile-cache`, by scripts/compile-cache.ts, in
// Node's portable form: entries keyed by paths relative to it, so they hold wherever the package is
// installed): then even the first start after an install reads compiled code. It is used only when
// nobody chose a cache (`NODE_COMPILE_CACHE`) or turned it off (`NODE_DISABLE_COMPILE_CACHE`), and
// only by the Node version that wrote it (Node keys the cache by version); else Node's default cache
// (`os.tmpdir()`). A cache that cannot be written (a read-only install) is only read.
import { existsSync } from "node:fs"
import module from "node:module"
import { fileURLToPath } from "node:url"

const shipped = fileURLToPath(new URL("../compile-cache", import.meta.url))
const useShipped =
  process.env.NODE_COMPILE_CACHE === undefined &&
  process.env.NODE_DISABLE_COMPILE_CACHE === undefined &&
  existsSync(shipped)
try {
  // The options form (`portable`) is a newer Node's (24 has it); an older one throws on it: its default then.
  if (useShipped) module.enableCompileCache?.({ directory: shipped, portable: true })
  else module.enableCompileCache?.()
} catch {
  module.enableCompileCache?.()
}
await import("./palyrad-main.js")

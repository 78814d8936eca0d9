// Bench-only preload for the daemon (`node --import <this> palyrad.js`, with BENCH_ALLOC_PROF=<dir>):
// V8's sampling heap profiler over everything allocated, collected objects included (what `--heap-prof`
// leaves out: it keeps only what is still live, and GC cost follows what dies young). The profile is
// written to <dir> at the first SIGUSR2 (a benchmark sends it after its work, see `collectGarbage`).
// Summarize with `node bench/lib/allocprof.mjs <file.heapprofile>`.
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector"
import { join } from "node:path"

const dir = process.env.BENCH_ALLOC_PROF
if (dir) {
  const session = new Session()
  session.connect()
  session.post("HeapProfiler.startSampling", {
    samplingInterval: 16_384,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true
  })
  process.once("SIGUSR2", () => {
    session.post("HeapProfiler.stopSampling", (error, result) => {
      if (error) console.error("alloc profile:", error)
      else writeFileSync(join(dir, `Alloc.${process.pid}.heapprofile`), JSON.stringify(result.profile))
      session.disconnect()
    })
  })
}

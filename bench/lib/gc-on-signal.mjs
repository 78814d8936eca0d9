// Bench-only preload for the daemon (`node --expose-gc --import <this> palyrad.js`): a full garbage
// collection on SIGUSR2, so a benchmark reads resident memory that is live, not garbage not yet
// collected. Nothing in the daemon itself changes.
if (typeof globalThis.gc === "function") {
  process.on("SIGUSR2", () => {
    globalThis.gc()
    globalThis.gc()
  })
}

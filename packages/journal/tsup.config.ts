import { defineConfig } from "tsup"

// Both builds write to dist/ at once, so neither cleans it: the package's build script does.
export default defineConfig([
  {
    entry: ["src/index.ts"],
    format: ["esm"],
    target: "node22",
    platform: "node",
    dts: false,
    sourcemap: true,
    clean: false,
    tsconfig: "tsconfig.build.json"
  },
  {
    // The writer thread (internal/writerClient.ts starts it): one self-contained file, so a worker
    // starts without loading core and effect. It needs only the hash chain's pure functions
    // (internal/chain.ts) and core's `Canonical`, bundled from sources; better-sqlite3 stays external.
    entry: { "writer-worker": "src/internal/writer-worker.ts" },
    format: ["esm"],
    target: "node22",
    platform: "node",
    dts: false,
    sourcemap: true,
    clean: false,
    splitting: false,
    tsconfig: "tsconfig.build.json",
    noExternal: [/^(?!better-sqlite3$).*/],
    external: ["better-sqlite3"],
    esbuildOptions(options) {
      options.alias = { ...options.alias, "@palyra/core": "./build/core-canonical.ts" }
    }
  }
])

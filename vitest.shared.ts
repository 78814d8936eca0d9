import { defineConfig } from "vitest/config"

/**
 * Shared vitest settings. Workspace packages resolve to their TypeScript sources through the
 * `@palyra/source` export condition, so tests never need a prior build of their dependencies.
 */
export default defineConfig({
  resolve: { conditions: ["@palyra/source", "module", "node", "development|production"] },
  ssr: { resolve: { conditions: ["@palyra/source", "node", "development|production"] } },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    fakeTimers: { toFake: [] },
    // The JSON report feeds the workspace-wide closing line (scripts/test-summary.mjs).
    reporters: ["default", "json"],
    outputFile: { json: ".vitest-report.json" }
  }
})

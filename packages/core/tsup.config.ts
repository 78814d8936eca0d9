import { defineConfig } from "tsup"

export default defineConfig({
  entry: [
    "src/index.ts",
    "src/cedar.ts",
    "src/ai-sdk.ts",
    "src/models.ts",
    "src/tools.ts",
    "src/context.ts",
    "src/memory.ts",
    "src/testing.ts",
    "src/journal-contract.ts"
  ],
  format: ["esm"],
  target: "node22",
  platform: "node",
  dts: false,
  sourcemap: true,
  clean: true,
  tsconfig: "tsconfig.build.json"
})

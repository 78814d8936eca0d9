import { defineConfig } from "tsup"

export default defineConfig({
  entry: ["src/index.ts", "src/lazy.ts"],
  // lazy.ts imports the services dynamically: they stay a chunk of their own.
  splitting: true,
  format: ["esm"],
  target: "node22",
  platform: "node",
  dts: false,
  sourcemap: true,
  clean: true,
  tsconfig: "tsconfig.build.json"
})

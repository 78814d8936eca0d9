import { defineConfig } from "tsup"

export default defineConfig({
  entry: ["src/index.ts", "src/config.ts", "src/connectors/Slack.ts"],
  format: ["esm"],
  target: "node22",
  platform: "node",
  dts: false,
  sourcemap: true,
  clean: true,
  tsconfig: "tsconfig.build.json"
})

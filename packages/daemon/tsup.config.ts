import { defineConfig } from "tsup"

export default defineConfig({
  entry: ["src/index.ts", "src/bin/palyrad.ts", "src/bin/palyra.ts", "src/bin/palyrad-main.ts"],
  format: ["esm"],
  target: "node22",
  platform: "node",
  dts: false,
  sourcemap: true,
  clean: true,
  splitting: true,
  tsconfig: "tsconfig.build.json",
  // One bundle loads far faster than hundreds of ESM files: inline every pure-JS dependency;
  // keep the native addon and the Cedar wasm package (which loads its .wasm by path) external.
  noExternal: [/^(?!better-sqlite3$|@cedar-policy\/cedar-wasm|@ai-sdk\/anthropic).*/],
  // @ai-sdk/anthropic is optional: loaded when installed and configured.
  external: ["better-sqlite3", "@cedar-policy/cedar-wasm", "@cedar-policy/cedar-wasm/nodejs", "@ai-sdk/anthropic"],
  // tr46 (grammY → node-fetch → whatwg-url) requires Node's deprecated `punycode` module, which
  // prints a deprecation warning on every start; bundle the userland package of the same API instead.
  esbuildOptions(options) {
    options.alias = { ...options.alias, punycode: "punycode/" }
  },
  banner: {
    // Bundled CommonJS dependencies expect `require`.
    js: "import { createRequire as __palyraCreateRequire } from 'node:module'; const require = __palyraCreateRequire(import.meta.url);"
  }
})

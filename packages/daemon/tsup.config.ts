import { builtinModules } from "node:module"
import { fileURLToPath } from "node:url"
import { parse } from "acorn"
import { defineConfig, type Options } from "tsup"

type Plugin = NonNullable<Options["esbuildPlugins"]>[number]
type TsupPlugin = NonNullable<Options["plugins"]>[number]

/**
 * Node's built-in modules are loaded with `require`, not an ESM `import`: an ESM import of a
 * built-in makes Node build its ESM facade, which reads every export, getters included, so
 * `import … from "node:http"` loads Node's bundled undici (`http.WebSocket` …) and `node:fs` its
 * streams at every start (~20-30 ms of CPU measured). esbuild turns the named imports of this
 * CommonJS shim into property reads where they are used, so nothing else changes.
 */
const builtinsByRequire: Plugin = {
  name: "builtins-by-require",
  setup(build) {
    const names = new Set(builtinModules.filter((name) => name !== "module"))
    build.onResolve({ filter: /^(node:)?[a-z_/]+$/ }, (args) => {
      const name = args.path.replace(/^node:/, "")
      if (args.kind !== "import-statement" || !names.has(name)) return undefined
      return { path: name, namespace: "builtin-by-require" }
    })
    build.onLoad({ filter: /.*/, namespace: "builtin-by-require" }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(`node:${args.path}`)})`,
      loader: "js"
    }))
  }
}

/**
 * `ws` and `mime` for `@effect/platform-node` are `src/internal/lazyWs.ts` and `lazyMime.ts`: shims
 * that load the package on first use. platform-node imports both at top level but uses `ws` only on
 * a WebSocket upgrade and `mime` only to type a file response, so their CommonJS bodies (and
 * `node:https`, which `ws` requires) need not run at every start. A shim's own `require` of the
 * package resolves as platform-node's import would have (the same copy).
 */
const lazyShims: Plugin = {
  name: "lazy-shims",
  setup(build) {
    const shims: Record<string, string> = {
      ws: fileURLToPath(new URL("./src/internal/lazyWs.ts", import.meta.url)),
      mime: fileURLToPath(new URL("./src/internal/lazyMime.ts", import.meta.url))
    }
    const platformNodeDirs = new Map<string, string>()
    build.onResolve({ filter: /^(ws|mime)$/ }, (args) => {
      const name = args.path
      if (args.importer === shims[name]) {
        const resolveDir = platformNodeDirs.get(name)
        if (resolveDir === undefined) throw new Error(`lazy-shims: ${name} resolved from its shim before platform-node`)
        return build.resolve(name, { kind: args.kind, resolveDir, pluginData: "lazy-shims" })
      }
      if (args.pluginData === "lazy-shims" || !/[\\/]@effect[\\/]platform-node[\\/]/.test(args.importer))
        return undefined
      platformNodeDirs.set(name, args.resolveDir)
      return { path: shims[name]! }
    })
  }
}

/**
 * What `charset: "ascii"` leaves: esbuild escapes non-ASCII characters in strings and identifiers,
 * but copies the comments it keeps verbatim (and leaves regular-expression literals and tagged
 * templates as written), and one "\u2014" in a comment is enough for V8 to hold the whole chunk as a
 * two-byte string. Each non-ASCII UTF-16 code unit INSIDE A COMMENT becomes one "?" (columns, so the
 * source map, unchanged); the comments are found by parsing the chunk (acorn), never by pattern, so
 * code — a regular expression, a tagged template — is never touched. A chunk with non-ASCII code
 * left after that is written as it is (correct, only held two-byte) with a warning; the daemon's
 * `bundle.test.ts` fails on it, so it is seen.
 */
const asciiComments: TsupPlugin = {
  name: "ascii-comments",
  renderChunk(code, chunk) {
    if (!/[\u0080-\uffff]/.test(code)) return undefined
    const comments: Array<readonly [number, number]> = []
    parse(code, {
      ecmaVersion: "latest",
      sourceType: "module",
      allowHashBang: true,
      onComment: (_block, _text, start, end) => {
        comments.push([start, end])
      }
    })
    let out = ""
    let at = 0
    for (const [start, end] of comments) {
      out += code.slice(at, start) + code.slice(start, end).replace(/[\u0080-\uffff]/g, "?")
      at = end
    }
    out += code.slice(at)
    if (/[\u0080-\uffff]/.test(out)) console.warn(`ascii-comments: ${chunk.path} keeps non-ASCII code (held two-byte)`)
    return { code: out }
  }
}

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
  // Keep `node:` on built-in imports, so they reach `builtinsByRequire` (tsup's own plugin, first in
  // line, would otherwise strip the prefix and mark them external).
  removeNodeProtocol: false,
  esbuildPlugins: [builtinsByRequire, lazyShims],
  plugins: [asciiComments],
  esbuildOptions(options) {
    options.alias = { ...options.alias, punycode: "punycode/" }
    // ASCII-only output (tsup's default is UTF-8): one non-ASCII character anywhere in a chunk (a
    // "—" in a kept comment, an "…" in a template) makes V8 hold that chunk's whole source as a
    // two-byte string, twice its size, for the life of the process (it keeps sources for lazy
    // compilation), and decode it from UTF-8 at every start. Escaped, every chunk is one-byte.
    options.charset = "ascii"
  },
  banner: {
    // Bundled CommonJS dependencies expect `require`.
    js: "import { createRequire as __palyraCreateRequire } from 'node:module'; const require = __palyraCreateRequire(import.meta.url);"
  }
})

import { createHash } from "node:crypto"
import { mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Plugins } from "../src/index.js"
import {
  callTool,
  canaryServer,
  exampleDir,
  probeManifest,
  resultOf,
  sandboxDirs,
  wasmOf,
  writePlugin
} from "./support/fixtures.js"

const probe = wasmOf("test/fixtures", "misbehave")

describe("the word-count example", () => {
  it.scopedLive("reads a workspace file through palyra_read_file; the result names the module's digest", () =>
    Effect.gen(function* () {
      const { workspace } = yield* sandboxDirs
      writeFileSync(join(workspace, "poem.txt"), "two roads diverged\nin a yellow wood\n")
      const plugin = yield* Plugins.load(exampleDir("word-count"), { workspace })
      const digest = createHash("sha256")
        .update(readFileSync(wasmOf("examples", "word-count")))
        .digest("hex")
      assert.strictEqual(plugin.digest, digest)
      assert.strictEqual(plugin.tool.name, `plugin.word-count@${digest.slice(0, 16)}`)
      assert.strictEqual(plugin.tool.risk, "low")
      assert.strictEqual(plugin.tool.category, "text")
      const result = resultOf(yield* callTool(plugin.tool, { path: "poem.txt" }))
      assert.deepStrictEqual(result.plugin, { name: "word-count", digest: `sha256:${digest}` })
      assert.deepStrictEqual(result.output, { path: "poem.txt", lines: 2, words: 7, bytes: 36 })
      assert.deepStrictEqual(result.hostCalls, [{ fn: "read_file", target: "poem.txt", ok: true, detail: "36 bytes" }])
    })
  )

  it.scopedLive("invalid arguments never reach the plugin", () =>
    Effect.gen(function* () {
      const { workspace } = yield* sandboxDirs
      const plugin = yield* Plugins.load(exampleDir("word-count"), { workspace })
      for (const args of [{}, { path: 5 }, { path: "a.txt", extra: true }, { path: "" }, "poem.txt"]) {
        const error = yield* Effect.flip(callTool(plugin.tool, args))
        assert.strictEqual(error.reason, "invalid_arguments", JSON.stringify(args))
      }
      assert.strictEqual(plugin.invocations(), 0)
      writeFileSync(join(workspace, "a.txt"), "x")
      yield* callTool(plugin.tool, { path: "a.txt" })
      assert.strictEqual(plugin.invocations(), 1)
    })
  )
})

describe("confinement: a plugin reads nothing outside the workspace", () => {
  it.scopedLive("`..`, absolute paths and a symlink out are refused; the canary is never read", () =>
    Effect.gen(function* () {
      const { base, workspace, plugins } = yield* sandboxDirs
      const outside = join(base, "outside")
      mkdirSync(outside)
      const canary = join(outside, "canary.txt")
      writeFileSync(canary, "CANARY-SECRET-7f3a")
      const before = statSync(canary)
      symlinkSync(outside, join(workspace, "link"))
      writeFileSync(join(workspace, "inside.txt"), "fine")
      const plugin = yield* Plugins.load(
        writePlugin(plugins, "reader", probeManifest("reader", "read", { capabilities: ["fs.read"] }), probe),
        { workspace }
      )
      for (const path of [
        "../outside/canary.txt",
        "../../../../../../etc/passwd",
        canary,
        "/etc/passwd",
        "link/canary.txt"
      ]) {
        const result = resultOf(yield* callTool(plugin.tool, { path }))
        const output = result.output as { ok: boolean; text: string }
        assert.isFalse(output.ok, path)
        assert.match(output.text, /^refused: /, path)
        assert.notInclude(JSON.stringify(result), "CANARY-SECRET", path)
        assert.isFalse(result.hostCalls[0]?.ok, path)
      }
      const inside = resultOf(yield* callTool(plugin.tool, { path: "inside.txt" }))
      assert.deepStrictEqual(inside.output, { ok: true, text: "fine" })
      const after = statSync(canary)
      assert.strictEqual(after.mtimeMs, before.mtimeMs)
      assert.strictEqual(readFileSync(canary, "utf8"), "CANARY-SECRET-7f3a")
    })
  )

  it.scopedLive("without the fs.read capability every read is refused", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      writeFileSync(join(workspace, "inside.txt"), "fine")
      const plugin = yield* Plugins.load(writePlugin(plugins, "reader", probeManifest("reader", "read"), probe), {
        workspace
      })
      const result = resultOf(yield* callTool(plugin.tool, { path: "inside.txt" }))
      assert.deepStrictEqual(result.output, {
        ok: false,
        text: "capability_not_granted: this plugin did not ask for fs.read"
      })
    })
  )

  it.scopedLive("a host that does not grant a capability does not load a plugin asking for it", () =>
    Effect.gen(function* () {
      const { workspace } = yield* sandboxDirs
      const error = yield* Effect.flip(Plugins.load(exampleDir("http-get"), { workspace, grant: ["fs.read"] }))
      assert.strictEqual(error._tag, "PluginLoadError")
      assert.match(error.message, /plugin\.toml: asks for http\.fetch, which this host does not grant/)
    })
  )
})

describe("network: only through palyra_http_fetch, with the capability and the allowlist", () => {
  it.scopedLive("without the capability, or through Extism's own HTTP, nothing connects", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      const canary = yield* canaryServer
      const url = `http://127.0.0.1:${canary.port}/`
      const http = { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true }
      const noCapability = yield* Plugins.load(writePlugin(plugins, "a", probeManifest("a", "fetch"), probe), {
        workspace,
        http
      })
      const refused = resultOf(yield* callTool(noCapability.tool, { url }))
      assert.deepStrictEqual(refused.output, {
        ok: false,
        text: "capability_not_granted: this plugin did not ask for http.fetch"
      })
      // Extism's own `http_request`, even for a plugin that has the capability: off.
      const native = yield* Plugins.load(
        writePlugin(
          plugins,
          "b",
          { ...probeManifest("b", "get_native"), capabilities: ["http.fetch"] },
          wasmOf("examples", "http-get")
        ),
        { workspace, http }
      )
      const nativeError = yield* Effect.flip(callTool(native.tool, { url }))
      assert.strictEqual(nativeError.reason, "failed")
      assert.strictEqual(canary.connections(), 0)
    })
  )

  it.scopedLive("with the capability it goes through safeFetch: private addresses refused unless allowed", () =>
    Effect.gen(function* () {
      const { workspace } = yield* sandboxDirs
      const canary = yield* canaryServer
      const url = `http://127.0.0.1:${canary.port}/hello`
      const load = (http?: Plugins.HttpOptions) => Plugins.load(exampleDir("http-get"), { workspace, http })
      const output = (plugin: Plugins.LoadedPlugin) =>
        callTool(plugin.tool, { url }).pipe(Effect.map((o) => resultOf(o).output as Record<string, unknown>))

      assert.deepStrictEqual(yield* output(yield* load()), {
        error: "host_not_allowed: this host allows plugins no network hosts"
      })
      const offList = yield* output(yield* load({ allowHosts: ["example.com"], allowPrivateNetworks: true }))
      assert.match(String(offList.error), /^host_not_allowed: /)
      const privateRefused = yield* output(yield* load({ allowHosts: ["127.0.0.1"] }))
      assert.match(String(privateRefused.error), /^private_address: /)
      assert.strictEqual(canary.connections(), 0)

      const allowed = yield* load({ allowHosts: ["127.0.0.1"], allowPrivateNetworks: true })
      assert.strictEqual(allowed.tool.risk, "sensitive")
      const result = resultOf(yield* callTool(allowed.tool, { url }))
      const response = (result.output as { response: { status: number; body: string } }).response
      assert.strictEqual(response.status, 200)
      assert.strictEqual(response.body, "canary says hello")
      assert.deepStrictEqual(result.hostCalls, [{ fn: "http_fetch", target: url, ok: true, detail: "status 200" }])
      assert.strictEqual(canary.connections(), 1)
    })
  )
})

describe("limits: memory and time, and the host stays healthy", () => {
  it.scopedLive("memory growth past the plugin's limit fails inside the module; the next call works", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      const limits = { memory_pages: 64 }
      const grow = yield* Plugins.load(writePlugin(plugins, "grow", probeManifest("grow", "grow", { limits }), probe), {
        workspace
      })
      const small = resultOf(yield* callTool(grow.tool, { pages: "8" }))
      assert.isAbove((small.output as { pages: number }).pages, 8)
      const error = yield* Effect.flip(callTool(grow.tool, { pages: "100" }))
      assert.strictEqual(error.reason, "failed")
      assert.match(error.message, /unreachable/)
      // The same module with a higher ceiling grows fine: the limit, not the module, stopped it.
      const roomy = yield* Plugins.load(
        writePlugin(plugins, "roomy", probeManifest("roomy", "grow", { limits: { memory_pages: 256 } }), probe),
        { workspace }
      )
      assert.isAbove((resultOf(yield* callTool(roomy.tool, { pages: "100" })).output as { pages: number }).pages, 100)
      // A runtime allocating until it gives up is stopped by the same ceiling, well before its time limit.
      const hog = yield* Plugins.load(
        writePlugin(
          plugins,
          "hog",
          probeManifest("hog", "hog", { limits: { memory_pages: 64, timeout_ms: 20_000 } }),
          probe
        ),
        { workspace }
      )
      const started = Date.now()
      const hogError = yield* Effect.flip(callTool(hog.tool, {}))
      assert.strictEqual(hogError.reason, "failed")
      assert.isBelow(Date.now() - started, 10_000)
      assert.isAbove((resultOf(yield* callTool(grow.tool, { pages: "4" })).output as { pages: number }).pages, 4)
    })
  )

  it.scopedLive("an endless loop is stopped at its time limit, the event loop keeps running, the next call works", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      const spin = yield* Plugins.load(
        writePlugin(plugins, "spin", probeManifest("spin", "spin", { limits: { timeout_ms: 300 } }), probe),
        { workspace }
      )
      const echo = yield* Plugins.load(writePlugin(plugins, "echo", probeManifest("echo", "echo"), probe), {
        workspace
      })
      // A timer on the host's event loop keeps ticking while the plugin spins in its worker.
      let ticks = 0
      const ticker = yield* Effect.fork(
        Effect.forever(Effect.sleep("20 millis").pipe(Effect.zipRight(Effect.sync(() => ticks++))))
      )
      const started = Date.now()
      const error = yield* Effect.flip(callTool(spin.tool, {}))
      const elapsed = Date.now() - started
      yield* Fiber.interrupt(ticker)
      // (the message says why, should it ever be something else)
      assert.strictEqual(error.reason === "timeout" ? "timeout" : error.message, "timeout")
      assert.isAtLeast(elapsed, 300)
      assert.isBelow(elapsed, 2_000)
      assert.isAbove(ticks, 5)
      assert.deepStrictEqual(resultOf(yield* callTool(echo.tool, { hello: "again" })).output, { hello: "again" })
      // The spinning plugin itself is usable again (a fresh instance) and stops again.
      assert.strictEqual((yield* Effect.flip(callTool(spin.tool, {}))).reason, "timeout")
    })
  )

  it.scopedLive("cancelling a call ends its worker at once", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      const spin = yield* Plugins.load(
        writePlugin(plugins, "spin", probeManifest("spin", "spin", { limits: { timeout_ms: 30_000 } }), probe),
        { workspace }
      )
      // A worker holds a MessagePort open on this side while it lives.
      const ports = () => process.getActiveResourcesInfo().filter((r) => r === "MessagePort").length
      const baseline = ports()
      const fiber = yield* Effect.fork(callTool(spin.tool, {}))
      // Wait until the call itself runs (starting a worker takes a while on a busy machine).
      yield* Effect.sleep("50 millis").pipe(
        Effect.repeat({ until: () => ports() > baseline && spin.invocations() === 1, times: 200 })
      )
      yield* Effect.sleep("100 millis")
      const started = Date.now()
      yield* Fiber.interrupt(fiber)
      assert.isBelow(Date.now() - started, 1_000)
      // Its worker is gone: no more open ports than before the call (another test's worker may close too).
      yield* Effect.sleep("20 millis").pipe(Effect.repeat({ until: () => ports() <= baseline, times: 50 }))
      assert.isAtMost(ports(), baseline)
      assert.strictEqual(spin.invocations(), 1)
    })
  )
})

describe("loading: a bad plugin fails with one message naming its file", () => {
  const wasiImporter = new Uint8Array([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...[0x01, 0x09, 0x01, 0x60, 0x04, 0x7f, 0x7f, 0x7f, 0x7f, 0x01, 0x7f],
    ...[0x02, 0x23, 0x01, 0x16, ...new TextEncoder().encode("wasi_snapshot_preview1")],
    ...[0x08, ...new TextEncoder().encode("fd_write"), 0x00, 0x00]
  ])

  it.scopedLive("bad manifests, modules that are not wasm or do not compile, WASI imports, escapes", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      const good = probeManifest("good", "echo")
      const failure = (dir: string, options: Partial<Plugins.Options> = {}) =>
        Effect.flip(Plugins.load(dir, { workspace, ...options })).pipe(Effect.map((e) => e.message))

      const syntax = writePlugin(plugins, "syntax", good, probe)
      writeFileSync(join(syntax, "plugin.json"), "{ not json")
      assert.match(yield* failure(syntax), /syntax\/plugin\.json: not valid JSON/)

      const fields = writePlugin(plugins, "fields", { ...good, name: "Bad Name", description: undefined }, probe)
      const fieldsMessage = yield* failure(fields)
      assert.match(fieldsMessage, /fields\/plugin\.json: /)
      assert.match(fieldsMessage, /name: a name is 1 to 32 lower-case letters/)
      assert.match(fieldsMessage, /description: is missing/)

      const schema = writePlugin(plugins, "schema", { ...good, parameters: { type: "object", bogus: 1 } }, probe)
      assert.match(yield* failure(schema), /schema\/plugin\.json: .*invalid parameters schema/)

      const notWasm = writePlugin(plugins, "notwasm", good, new TextEncoder().encode("MZ not a module"))
      assert.match(yield* failure(notWasm), /notwasm\/plugin\.wasm: not a WebAssembly module/)

      const broken = readFileSync(probe).subarray(0, 8)
      const garbage = writePlugin(plugins, "garbage", good, new Uint8Array([...broken, 0x01, 0x03, 0xff, 0xff, 0xff]))
      assert.match(yield* failure(garbage), /garbage\/plugin\.wasm: does not compile/)

      const wasi = writePlugin(plugins, "wasi", good, wasiImporter)
      assert.match(
        yield* failure(wasi),
        /wasi\/plugin\.wasm: imports function wasi_snapshot_preview1\.fd_write; plugins get only/
      )

      const escaping = writePlugin(plugins, "escape", { ...good, module: "../syntax/plugin.wasm" }, probe)
      assert.match(yield* failure(escaping), /escape\/plugin\.json: module: .*outside the workspace/)

      const noExport = writePlugin(plugins, "noexport", { ...good, export: "missing" }, probe)
      assert.match(yield* failure(noExport), /noexport\/plugin\.wasm: exports no function "missing"/)

      const greedy = writePlugin(plugins, "greedy", { ...good, limits: { memory_pages: 512 } }, probe)
      assert.match(yield* failure(greedy), /limits\.memory_pages is 512; this host allows at most 256/)
    })
  )

  it.scopedLive("a directory loads in name order, skips folders that are not plugins, refuses twin names", () =>
    Effect.gen(function* () {
      const { workspace, plugins } = yield* sandboxDirs
      writePlugin(plugins, "b-echo", probeManifest("echo", "echo"), probe)
      writePlugin(plugins, "a-spin", probeManifest("spin", "spin"), probe)
      mkdirSync(join(plugins, "notes"))
      writePlugin(plugins, ".hidden", { bad: true }, probe)
      const tools = yield* Plugins.loadDirectory(plugins, { workspace })
      assert.deepStrictEqual(
        tools.map((t) => t.name.split("@")[0]),
        ["plugin.spin", "plugin.echo"]
      )
      writePlugin(plugins, "c-echo", probeManifest("echo", "grow"), probe)
      const twin = yield* Effect.flip(Plugins.loadDirectory(plugins, { workspace }))
      assert.match(twin.message, /c-echo: another plugin is already named echo/)
      // The shipped examples folder is itself a plugins directory.
      const examples = yield* Plugins.loadPlugins(join(exampleDir("word-count"), ".."), { workspace })
      assert.deepStrictEqual(
        examples.map((p) => p.manifest.name),
        ["http-get", "word-count"]
      )
    })
  )
})

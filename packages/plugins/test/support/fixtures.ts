import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { type Errors, type Ids, Tool } from "@palyra/core"
import { Effect } from "effect"

const root = fileURLToPath(new URL("../..", import.meta.url))

/** A built module of the package: `examples/<name>` or `test/fixtures/<name>`. */
export const wasmOf = (dir: "examples" | "test/fixtures", name: string) => join(root, dir, name, "plugin.wasm")
export const exampleDir = (name: string) => join(root, "examples", name)

/** A temporary folder with `workspace/` and `plugins/`, removed when the scope closes. */
export const sandboxDirs = Effect.acquireRelease(
  Effect.sync(() => {
    const base = mkdtempSync(join(tmpdir(), "palyra-plugins-"))
    const workspace = join(base, "workspace")
    const plugins = join(base, "plugins")
    mkdirSync(workspace)
    mkdirSync(plugins)
    return { base, workspace, plugins }
  }),
  ({ base }) => Effect.sync(() => rmSync(base, { recursive: true, force: true }))
)

/** Write a plugin folder: a manifest (JSON) and a copy of `wasm` (or the given bytes). */
export const writePlugin = (
  pluginsDir: string,
  folder: string,
  manifest: Record<string, unknown>,
  wasm: string | Uint8Array
) => {
  const dir = join(pluginsDir, folder)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, "plugin.json"), JSON.stringify(manifest, null, 2))
  if (typeof wasm === "string") copyFileSync(wasm, join(dir, "plugin.wasm"))
  else writeFileSync(join(dir, "plugin.wasm"), wasm)
  return dir
}

/** A manifest for one export of the misbehaving test plugin. */
export const probeManifest = (
  name: string,
  exportName: string,
  extra: Record<string, unknown> = {}
): Record<string, unknown> => ({
  name,
  description: `test plugin ${name}`,
  export: exportName,
  risk: "low",
  parameters: { type: "object" },
  ...extra
})

/** The same module with a custom section appended: still valid, a different digest. */
export const withCustomSection = (wasm: string, note: string): Uint8Array => {
  const bytes = readFileSync(wasm)
  const name = Buffer.from("palyra-test")
  const payload = Buffer.from(note)
  const body = Buffer.concat([Buffer.from([name.length]), name, payload])
  if (body.length > 127) throw new Error("keep the note short")
  return new Uint8Array(Buffer.concat([bytes, Buffer.from([0, body.length]), body]))
}

/** Run one tool through the real `ToolRuntime` (decode, timeout, render). */
export const callTool = (tool: Tool.AnyTool, args: unknown): Effect.Effect<Tool.ToolOutcome, Errors.ToolError> =>
  Tool.makeRuntime([tool]).execute(tool, args, {
    sessionId: "01J00000000000000000000000" as Ids.SessionId,
    runId: "01J00000000000000000000001" as Ids.RunId,
    toolCallId: "01J00000000000000000000002" as Ids.ToolCallId,
    principal: "tester",
    note: () => Effect.void
  })

/** The JSON a plugin tool returned. */
export const resultOf = (outcome: Tool.ToolOutcome) =>
  JSON.parse(outcome.output) as {
    plugin: { name: string; digest: string }
    output: unknown
    hostCalls: Array<{ fn: string; target: string; ok: boolean; detail?: string }>
  }

/** An HTTP server on 127.0.0.1 that counts the connections it accepts. */
export const canaryServer = Effect.acquireRelease(
  Effect.async<{ server: Server; port: number; connections: () => number }>((resume) => {
    let connections = 0
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" })
      res.end("canary says hello")
    })
    server.on("connection", () => {
      connections++
    })
    server.listen(0, "127.0.0.1", () =>
      resume(Effect.succeed({ server, port: (server.address() as AddressInfo).port, connections: () => connections }))
    )
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
)

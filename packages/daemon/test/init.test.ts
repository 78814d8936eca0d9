/**
 * `palyra init`: the file it writes loads with palyrad's own `Config.load` (from flags, for every
 * provider, and after answering the prompts on a pseudo-terminal); it never replaces a file
 * without `--force`; bad answers write nothing.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { Config, Init } from "../src/index.js"
import { fresh, runCli, runOnTerminal } from "./support.js"

const load = (file: string) => Effect.runPromise(Config.load({ config: file }, {}))

describe("palyra init", () => {
  it("--yes writes a commented palyra.toml from flags that palyrad loads with those values", async () => {
    const dir = fresh()
    const r = await runCli(dir, [
      "init",
      "--yes",
      "--model",
      "openai-compatible:http://127.0.0.1:11434/v1#llama3.2",
      "--workspace",
      "agent files",
      "--http-port",
      "8080",
      "--grpc-port",
      "0"
    ])
    expect(r.err).toBe("")
    expect(r.code).toBe(0)
    const file = join(dir, "palyra.toml")
    expect(r.out).toContain(`wrote ${file}`)
    const text = readFileSync(file, "utf8")
    expect(text).toMatch(/^# palyra\.toml/)
    expect(text).toContain("# The key is read from the environment variable OPENAI_COMPATIBLE_API_KEY")
    const config = await load(file)
    expect(config.models).toEqual(["openai-compatible:http://127.0.0.1:11434/v1#llama3.2"])
    expect(config.workspaceDir).toBe(join(dir, "agent files"))
    expect(config.dataDir).toBe(join(dir, ".palyra"))
    expect(config.server).toMatchObject({ host: "127.0.0.1", http_port: 8080, grpc_port: 0 })
    expect(config.shell.sandbox).toBe("none")
  }, 60_000)

  it("renders a file Config.load accepts for every provider, with the key variable named in a comment", async () => {
    const dir = fresh()
    const cases = [
      ["demo:scripted", undefined, "needs no key"],
      ["openai:gpt-4.1-mini", undefined, "read from the environment variable OPENAI_API_KEY"],
      ["anthropic:claude-sonnet-4-5", "MY_ANTHROPIC", 'ANTHROPIC_API_KEY="$MY_ANTHROPIC" palyrad'],
      ["openai-compatible:http://localhost:8000/v1#qwen", undefined, "OPENAI_COMPATIBLE_API_KEY"]
    ] as const
    for (const [i, [model, keyEnv, comment]] of cases.entries()) {
      const file = join(dir, `p${i}.toml`)
      const config = await Effect.runPromise(
        Init.write(file, { model, keyEnv, workspace: "ws", httpPort: 7000 + i, grpcPort: 0 }, { force: false })
      )
      expect(config.models).toEqual([model])
      expect(config.server.http_port).toBe(7000 + i)
      expect(readFileSync(file, "utf8")).toContain(comment)
      expect((await load(file)).file).toBe(file)
    }
  })

  it("writes [memory], [learning], [watchdog] and [tasks] with palyrad's defaults, commented, and edits to them load", async () => {
    const dir = fresh()
    const file = join(dir, "palyra.toml")
    await Effect.runPromise(
      Init.write(
        file,
        { model: "demo:scripted", keyEnv: undefined, workspace: "workspace", httpPort: 0, grpcPort: 0 },
        { force: false }
      )
    )
    const text = readFileSync(file, "utf8")
    for (const section of ["[memory]", "[learning]", "[watchdog]", "[tasks]"]) expect(text).toContain(`\n${section}\n`)
    expect(text).toContain('mode = "observe"')
    expect(text).toContain("auto_write_threshold_bps = 8000")
    expect(text).toMatch(/# .*kills tool processes left behind/)
    expect(text).toMatch(/# .*basis points/)
    expect(text).toContain("palyra incidents")
    const written = await load(file)
    const defaults = await Effect.runPromise(Config.load({}, {}))
    for (const key of ["memory", "learning", "watchdog", "tasks"] as const) expect(written[key]).toEqual(defaults[key])
    // The commented lines are real settings: uncomment or change them and palyrad reads them.
    writeFileSync(
      file,
      text
        .replace('mode = "observe"', 'mode = "auto"')
        .replace("# concurrency =", "concurrency =")
        .replace("# embedding_model =", "embedding_model =")
    )
    const edited = await load(file)
    expect(edited.watchdog.mode).toBe("auto")
    expect(edited.tasks.concurrency).toEqual({ "memory.reflect": 2 })
    expect(edited.memory.embedding_model).toBe("openai:text-embedding-3-small")
  })

  it("never replaces an existing file without --force", async () => {
    const dir = fresh()
    const file = join(dir, "palyra.toml")
    writeFileSync(file, 'model = "demo:scripted"\n# mine\n')
    const refused = await runCli(dir, ["init", "--yes"])
    expect(refused.code).toBe(1)
    expect(refused.err).toMatch(/exists; pass --force/)
    expect(readFileSync(file, "utf8")).toBe('model = "demo:scripted"\n# mine\n')
    const forced = await runCli(dir, ["init", "--yes", "--force", "--http-port", "9999"])
    expect(forced.code).toBe(0)
    expect((await load(file)).server.http_port).toBe(9999)
  }, 60_000)

  it("bad answers are usage errors and write nothing; without a terminal it needs --yes", async () => {
    const dir = fresh()
    const file = join(dir, "palyra.toml")
    for (const args of [
      ["--model", "gpt-4"],
      ["--model", "openai-compatible:ftp://x#m"],
      ["--http-port", "70000"],
      ["--key-env", "not a name"],
      ["--workspace", " "]
    ]) {
      const r = await runCli(dir, ["init", "--yes", ...args])
      expect(r.code, args.join(" ")).toBe(2)
      expect(existsSync(file)).toBe(false)
    }
    const asked = await runCli(dir, ["init"])
    expect(asked.code).toBe(2)
    expect(asked.err).toMatch(/--yes/)
    expect(existsSync(file)).toBe(false)
  }, 90_000)

  it("asks on a terminal: defaults by Enter, a typed workspace, then writes what palyrad loads", async () => {
    const dir = fresh()
    const { code, screen } = await runOnTerminal(
      dir,
      ["init"],
      [
        { when: /Model/, type: "\r" }, // the first choice: demo:scripted
        { when: /Workspace folder/, type: "my-agent\r" },
        { when: /HTTP port/, type: "\r" },
        { when: /gRPC port/, type: "\r" },
        { when: /Write .*palyra\.toml\?/, type: "\r" }
      ]
    )
    expect(screen).toContain("wrote")
    expect(code).toBe(0)
    const config = await load(join(dir, "palyra.toml"))
    expect(config.models).toEqual(["demo:scripted"])
    expect(config.workspaceDir).toBe(join(dir, "my-agent"))
    expect(config.server).toMatchObject({ http_port: 7420, grpc_port: 7421 })
  }, 90_000)
})

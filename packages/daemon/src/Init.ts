/**
 * `palyra init`: write a commented `palyra.toml` — after asking (on a terminal, with `@effect/cli`
 * prompts), or from flags for scripts (`--yes`). It never overwrites a file without `--force`, and
 * it checks that palyrad's own `Config.load` accepts what it wrote.
 *
 *   palyra init                                   ask, then write ./palyra.toml
 *   palyra init --yes --model openai:gpt-4.1-mini --http-port 8080
 *
 * @since 0.1.0
 */
import { existsSync, writeFileSync } from "node:fs"
import { resolve } from "node:path"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Prompt from "@effect/cli/Prompt"
import { Models } from "@palyra/core/models"
import { Effect, Either, Option, Schema } from "effect"
import { stringify } from "smol-toml"
import * as Config from "./Config.js"
import { CliEnv, CliIo, Failed, out, Usage } from "./internal/cli/io.js"

/** What `init` writes. @since 0.1.0 @category Models */
export interface Answers {
  /** A model spec (`demo:scripted`, `openai:gpt-4.1-mini`, `openai-compatible:URL#model`, …). */
  readonly model: string
  /** The environment variable that holds the provider's key (never the key itself). */
  readonly keyEnv: string | undefined
  readonly workspace: string
  readonly httpPort: number
  readonly grpcPort: number
}

/** The variable palyrad reads a provider's key from (see `@palyra/core/models`). @since 0.1.0 @category Models */
export const providerKeyEnv = (model: string): string | undefined => {
  const provider = model.slice(0, Math.max(0, model.indexOf(":")))
  return provider === "openai"
    ? "OPENAI_API_KEY"
    : provider === "anthropic"
      ? "ANTHROPIC_API_KEY"
      : provider === "openai-compatible"
        ? "OPENAI_COMPATIBLE_API_KEY"
        : undefined
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * Check answers before anything is written: the model spec parses, the key variable is a variable
 * name, the ports are ports.
 *
 * @since 0.1.0
 * @category Validation
 */
export const validate = (answers: Answers): Either.Either<Answers, string> => {
  const model = Effect.runSync(Effect.either(Models.parse(answers.model)))
  if (Either.isLeft(model)) return Either.left(model.left.message)
  if (answers.keyEnv !== undefined && !ENV_NAME.test(answers.keyEnv))
    return Either.left(`--key-env: "${answers.keyEnv}" is not an environment variable name`)
  for (const [name, port] of [
    ["http-port", answers.httpPort],
    ["grpc-port", answers.grpcPort]
  ] as const) {
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      return Either.left(`--${name}: ${port} is not a port number (0–65535)`)
  }
  if (answers.workspace.trim().length === 0) return Either.left("--workspace: must not be empty")
  return Either.right(answers)
}

const toml = (value: Record<string, unknown>) => stringify(value).trim()

/** The after-run sections' defaults, from palyrad's own schema (so the file and palyrad agree). */
const afterRunDefaults = () => {
  const { memory, learning, watchdog, tasks } = Schema.decodeUnknownSync(Config.ConfigFile)({})
  return { memory, learning, watchdog, tasks }
}

/** `[memory]`, `[learning]`, `[watchdog]` and `[tasks]` with their defaults, commented. */
const afterRunSections = (): Array<string> => {
  const { memory, learning, watchdog, tasks } = afterRunDefaults()
  return [
    "[memory]",
    "# Memory across sessions: before each model call the best items for the user's message are put in",
    "# the prompt (fenced, labelled untrusted), and the model gets memory.search / memory.save",
    "# (saving asks for approval under the default policies). `palyra memory search` reads it.",
    toml({ enabled: memory.enabled }),
    "# Tokens the injected block may take, and items at most.",
    toml({ inject_budget_tokens: memory.inject_budget_tokens }),
    toml({ inject_max_items: memory.inject_max_items }),
    "# Save what users say as notes when their runs end (off: only tools and learning write memory).",
    toml({ auto_ingest: memory.auto_ingest }),
    toml({ tools: memory.tools }),
    '# Vectors blended into search: "openai:<model>" or "openai-compatible:<base URL>#<model>".',
    '# embedding_model = "openai:text-embedding-3-small"',
    toml({ vector_weight: memory.vector_weight }),
    "",
    "[learning]",
    "# After each run a background reflection proposes facts, preferences and procedures, each with a",
    "# confidence in basis points (10000 = certain): at or above auto_write_threshold_bps they are saved to",
    "# memory; from min_confidence_bps they wait for review (`palyra learning list|accept|reject`).",
    toml({ enabled: learning.enabled }),
    toml({ auto_write_threshold_bps: learning.auto_write_threshold_bps }),
    toml({ min_confidence_bps: learning.min_confidence_bps }),
    '# "deterministic" (rules, no model call) or "session" (the default agent\'s model reflects).',
    toml({ model: learning.model }),
    "",
    "[watchdog]",
    '# "off", "observe" (incidents only, see `palyra incidents`) or "auto" (also cancels stuck runs,',
    "# requeues tasks whose worker died, kills tool processes left behind, reminds approvers).",
    toml({ mode: watchdog.mode }),
    toml({ interval_seconds: watchdog.interval_seconds }),
    "# A running run with no progress for this long; an approval pending this long.",
    toml({ run_stall_seconds: watchdog.run_stall_seconds }),
    toml({ approval_warn_seconds: watchdog.approval_warn_seconds }),
    "# A tool's process group running this long, even while its call runs.",
    toml({ process_max_seconds: watchdog.process_max_seconds }),
    "",
    "[tasks]",
    "# The background queue's worker (reflections, memory purges; `palyra tasks list`). A worker that stops",
    "# heartbeating loses a task's lease after this long, and the task is retried.",
    toml({ lease_seconds: tasks.lease_seconds }),
    "# Tasks of one kind at once, by kind (default 1 each):",
    '# concurrency = { "memory.reflect" = 2 }',
    ""
  ]
}

const keyComment = (answers: Answers): Array<string> => {
  const expected = providerKeyEnv(answers.model)
  if (expected === undefined) return ["# The demo model needs no key and no network."]
  const optional = expected === "OPENAI_COMPATIBLE_API_KEY" ? " (optional for local servers)" : ""
  if (answers.keyEnv === undefined || answers.keyEnv === expected)
    return [`# The key is read from the environment variable ${expected}${optional}, never from this file.`]
  return [
    `# The key: palyrad reads ${expected}${optional}; you keep it in ${answers.keyEnv}, so start palyrad with`,
    `#   ${expected}="$${answers.keyEnv}" palyrad`
  ]
}

/**
 * The commented file for these answers.
 *
 * @since 0.1.0
 * @category Rendering
 */
export const render = (answers: Answers): string =>
  [
    "# palyra.toml: palyrad's configuration (written by `palyra init`).",
    "# palyrad reads it from the directory it starts in (or --config FILE / PALYRA_CONFIG). Any setting",
    "# can be overridden by a PALYRA_* environment variable or a flag; `palyra doctor` checks it all.",
    "",
    "# The model, or several (an array) to fail over in order:",
    "#   demo:scripted                offline demo, no key, no network",
    "#   openai:gpt-4.1-mini          OPENAI_API_KEY (OPENAI_BASE_URL optional)",
    "#   anthropic:claude-sonnet-4-5  ANTHROPIC_API_KEY (install @ai-sdk/anthropic)",
    "#   openai-compatible:http://127.0.0.1:11434/v1#llama3.2   Ollama, vLLM, llama.cpp",
    toml({ model: answers.model }),
    ...keyComment(answers),
    "",
    "# The folder the agent's file tools may read and write (relative to this file).",
    toml({ workspace: answers.workspace }),
    "",
    "# Journal, admin token and anchor key (kept with mode 0700; the token file 0600).",
    toml({ data_dir: ".palyra" }),
    "",
    "# Policies: every *.cedar file of this folder replaces the built-in set (reloaded on change).",
    '# policies_dir = "policies"',
    "",
    "[server]",
    "# 127.0.0.1 keeps palyrad local; listen elsewhere only behind TLS.",
    toml({ host: "127.0.0.1" }),
    "# REST + server-sent events + OpenAI-compatible chat completions (0: any free port).",
    toml({ http_port: answers.httpPort }),
    "# gRPC, gRPC-Web and Connect (HTTP/2).",
    toml({ grpc_port: answers.grpcPort }),
    "",
    "[approvals]",
    "# How long a tool call waits for a human before it is denied.",
    "timeout_seconds = 600",
    "",
    "[shell]",
    '# Sandbox tier of every process a tool starts: "none", "limits" (rlimits, own user) or "os" (bubblewrap).',
    "# `palyra doctor` shows which tiers work on this machine.",
    'sandbox = "none"',
    "",
    ...afterRunSections()
  ].join("\n")

/**
 * Write the file: refuses to replace one unless `force`; then loads it with palyrad's
 * `Config.load` and fails with its message if that does not accept it.
 *
 * @since 0.1.0
 * @category Writing
 */
export const write = (
  file: string,
  answers: Answers,
  options: { readonly force: boolean; readonly env?: Record<string, string | undefined> }
): Effect.Effect<Config.Config, Failed> =>
  Effect.gen(function* () {
    if (!options.force && existsSync(file))
      return yield* new Failed({ message: `${file} exists; pass --force to replace it` })
    yield* Effect.try({
      // `wx` also refuses a file that appeared since the check.
      try: () => writeFileSync(file, render(answers), { flag: options.force ? "w" : "wx", mode: 0o644 }),
      catch: (e) => new Failed({ message: `cannot write ${file}: ${e instanceof Error ? e.message : String(e)}` })
    })
    // Only the file: no PALYRA_* variable of this shell should hide a mistake in it.
    return yield* Config.load({ config: file }, options.env ?? {}).pipe(
      Effect.mapError((e) => new Failed({ message: `wrote ${file}, but palyrad does not accept it: ${e.message}` }))
    )
  })

// =============================================================================
// Questions
// =============================================================================

const portPrompt = (message: string, initial: number) =>
  Prompt.text({
    message,
    default: String(initial),
    validate: (value) =>
      /^\d{1,5}$/.test(value.trim()) && Number(value) <= 65535
        ? Effect.succeed(value.trim())
        : Effect.fail("a port number, 0–65535")
  }).pipe(Prompt.map(Number))

const modelPrompt = Prompt.select({
  message: "Model",
  choices: [
    { title: "demo:scripted", value: "demo", description: "offline demo: no key, no network" },
    { title: "OpenAI", value: "openai", description: "needs OPENAI_API_KEY" },
    { title: "Anthropic", value: "anthropic", description: "needs ANTHROPIC_API_KEY and @ai-sdk/anthropic" },
    {
      title: "OpenAI-compatible server",
      value: "openai-compatible",
      description: "Ollama, vLLM, llama.cpp (a base URL)"
    }
  ] as const
}).pipe(
  Prompt.flatMap((provider) =>
    provider === "demo"
      ? Prompt.succeed("demo:scripted")
      : provider === "openai-compatible"
        ? Prompt.all([
            Prompt.text({ message: "Base URL", default: "http://127.0.0.1:11434/v1" }),
            Prompt.text({ message: "Model name", default: "llama3.2" })
          ]).pipe(Prompt.map(([url, m]) => `openai-compatible:${url}#${m}`))
        : Prompt.text({
            message: provider === "openai" ? "OpenAI model" : "Anthropic model",
            default: provider === "openai" ? "gpt-4.1-mini" : "claude-sonnet-4-5"
          }).pipe(Prompt.map((m) => `${provider}:${m}`))
  )
)

const given = {
  model: Options.text("model").pipe(
    Options.withDescription("model spec (demo:scripted, openai:gpt-4.1-mini, openai-compatible:URL#model, …)"),
    Options.optional
  ),
  keyEnv: Options.text("key-env").pipe(
    Options.withDescription("the environment variable holding the provider's key"),
    Options.optional
  ),
  workspace: Options.text("workspace").pipe(Options.withDescription("the agent's folder"), Options.optional),
  httpPort: Options.integer("http-port").pipe(Options.optional),
  grpcPort: Options.integer("grpc-port").pipe(Options.optional),
  yes: Options.boolean("yes").pipe(Options.withDescription("ask nothing: flags, then defaults")),
  force: Options.boolean("force").pipe(Options.withDescription("replace an existing file")),
  config: Options.text("config").pipe(
    Options.withDescription("where to write (default ./palyra.toml)"),
    Options.optional
  )
}

/**
 * `palyra init`.
 *
 * @since 0.1.0
 * @category Commands
 */
export const command = Command.make("init", given, (o) =>
  Effect.gen(function* () {
    const { cwd, env } = yield* CliEnv
    const io = yield* CliIo
    const file = resolve(
      cwd,
      Option.getOrElse(o.config, () => "palyra.toml")
    )
    if (!o.force && existsSync(file))
      return yield* new Failed({ message: `${file} exists; pass --force to replace it` })
    const ask = !o.yes
    if (ask && !io.interactive)
      return yield* new Usage({ message: "init asks its questions on a terminal; pass --yes to write from flags" })
    const model = Option.isSome(o.model) ? o.model.value : ask ? yield* modelPrompt : "demo:scripted"
    const defaultKeyEnv = providerKeyEnv(model)
    const keyEnv = Option.isSome(o.keyEnv)
      ? o.keyEnv.value
      : ask && defaultKeyEnv !== undefined
        ? yield* Prompt.text({ message: "Environment variable with the key", default: defaultKeyEnv })
        : defaultKeyEnv
    const workspace = Option.isSome(o.workspace)
      ? o.workspace.value
      : ask
        ? yield* Prompt.text({ message: "Workspace folder", default: "workspace" })
        : "workspace"
    const httpPort = Option.isSome(o.httpPort) ? o.httpPort.value : ask ? yield* portPrompt("HTTP port", 7420) : 7420
    const grpcPort = Option.isSome(o.grpcPort) ? o.grpcPort.value : ask ? yield* portPrompt("gRPC port", 7421) : 7421
    const answers = yield* Either.match(validate({ model, keyEnv, workspace, httpPort, grpcPort }), {
      onLeft: (message) => Effect.fail(new Usage({ message })),
      onRight: Effect.succeed
    })
    if (ask && !(yield* Prompt.confirm({ message: `Write ${file}?`, initial: true })))
      return yield* new Failed({ message: "nothing written" })
    const config = yield* write(file, answers, { force: o.force })
    const key = providerKeyEnv(config.models[0] ?? "")
    yield* out(
      [
        `wrote ${file} (palyrad accepts it: model ${config.models.join(" > ")}, HTTP port ${config.server.http_port})`,
        "next:",
        ...(key === undefined || key === "OPENAI_COMPATIBLE_API_KEY" || env[key]
          ? []
          : [`  export ${key}=…        (not set in this shell)`]),
        "  palyrad                (start the daemon here)",
        "  palyra doctor          (check the setup)",
        "  palyra chat            (talk to the agent)",
        ""
      ].join("\n")
    )
  })
).pipe(Command.withDescription("write a commented palyra.toml (asks on a terminal; --yes for scripts)"))

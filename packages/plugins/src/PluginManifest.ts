/**
 * A plugin's manifest: `plugin.json` or `plugin.toml` beside its WebAssembly module. It names the
 * tool, describes it for the model, gives its JSON Schema parameters, its risk and category (inputs
 * to policy), the capabilities it asks the host for and its limits.
 *
 * ```toml
 * name = "word-count"
 * description = "Count the lines, words and bytes of a text file in the workspace."
 * module = "plugin.wasm"          # default
 * export = "count"                # the function to call (default "run")
 * risk = "low"                    # low | sensitive | critical (default sensitive)
 * category = "text"
 * capabilities = ["fs.read"]      # fs.read | http.fetch
 * [parameters]                    # JSON Schema of the arguments
 * type = "object"
 * [limits]
 * memory_pages = 64               # 64 KiB pages of linear memory
 * timeout_ms = 5000               # wall clock per call
 * ```
 *
 * @since 0.1.0
 */
import { Effect, ParseResult, Schema } from "effect"
import { parse as parseToml } from "smol-toml"

/**
 * What a plugin may ask the host for: `fs.read` (read files of the workspace, confined to it) and
 * `http.fetch` (requests through the daemon's guarded fetch and its host allowlist).
 *
 * @since 0.1.0
 * @category Models
 */
export const Capability = Schema.Literal("fs.read", "http.fetch")

/** @since 0.1.0 @category Models */
export type Capability = typeof Capability.Type

/** @since 0.1.0 @category Models */
export const Limits = Schema.Struct({
  /** Most pages (64 KiB each) of linear memory the module may grow to. */
  memory_pages: Schema.optional(Schema.Int.pipe(Schema.between(1, 65_536))),
  /** Wall-clock time of one call, host calls included. */
  timeout_ms: Schema.optional(Schema.Int.pipe(Schema.between(1, 3_600_000)))
})

/** @since 0.1.0 @category Models */
export class Manifest extends Schema.Class<Manifest>("@palyra/plugins/Manifest")({
  name: Schema.String.pipe(
    Schema.pattern(/^[a-z][a-z0-9-]{0,31}$/, {
      message: () => "a name is 1 to 32 lower-case letters, digits and dashes, starting with a letter"
    })
  ),
  description: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(2000)),
  module: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)), {
    default: () => "plugin.wasm"
  }),
  export: Schema.optionalWith(
    Schema.String.pipe(
      Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, { message: () => "an export is a plain function name" })
    ),
    { default: () => "run" }
  ),
  parameters: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  risk: Schema.optionalWith(Schema.Literal("low", "sensitive", "critical"), { default: () => "sensitive" as const }),
  category: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(64)), {
    default: () => "plugin"
  }),
  capabilities: Schema.optionalWith(Schema.Array(Capability), { default: () => [] }),
  idempotent: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  limits: Schema.optionalWith(Limits, { default: () => ({}) })
}) {}

const decode = Schema.decodeUnknown(Manifest, { errors: "all", onExcessProperty: "error" })

/**
 * Parse a manifest's text (`json` or `toml`) and check it; the message names every offending field.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const parse = (text: string, format: "json" | "toml"): Effect.Effect<Manifest, string> =>
  Effect.try({
    try: (): unknown => (format === "json" ? JSON.parse(text) : parseToml(text)),
    catch: (cause) => `not valid ${format.toUpperCase()}: ${cause instanceof Error ? cause.message : String(cause)}`
  }).pipe(
    Effect.flatMap((raw) =>
      decode(raw).pipe(
        Effect.mapError((error) =>
          ParseResult.ArrayFormatter.formatErrorSync(error)
            .map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`)
            .join("; ")
        )
      )
    )
  )

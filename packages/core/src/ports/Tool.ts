/**
 * Tools: what an agent may do. A tool declares its parameters (an Effect `Schema` or a JSON Schema,
 * validated before execution), its risk and category (inputs to policy), a timeout, an output budget
 * and whether it is safe to retry after a crash (`idempotent`) or must run at most once.
 *
 * `ToolRuntime` is the catalog plus execution with those limits.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, JSONSchema, Layer, Option, ParseResult, Schema } from "effect"
import { InvalidArgument, ToolError } from "../domain/Errors.js"
import type { RunId, SessionId, ToolCallId } from "../domain/Ids.js"
import type { Risk } from "../domain/TapeEvent.js"
import { compile } from "./internal/jsonSchema.js"
import { timeoutFail, timeoutFailOn } from "./internal/timeout.js"
import { isTracing } from "./internal/traced.js"
import type { ToolSpec } from "./ModelProvider.js"

/** What a running tool knows about its call. @since 0.1.0 @category Models */
export interface ToolContext {
  readonly sessionId: SessionId
  readonly runId: RunId
  readonly toolCallId: ToolCallId
  readonly principal: string
  /** Write a note onto the session's tape (used by `session.note`). */
  readonly note: (text: string) => Effect.Effect<void>
}

/** @since 0.1.0 @category Models */
export type Idempotency = "idempotent" | "atMostOnce"

/**
 * How a tool isolates the processes it starts: `none` (an ordinary child process), `limits`
 * (allowlisted executables under resource limits) or `os` (also inside an OS sandbox: private
 * namespaces, no network unless allowed). Policies can require a tier.
 *
 * @since 0.1.0
 * @category Models
 */
export type SandboxTier = "none" | "limits" | "os"

/** A tool with its arguments already decoded to `A`. @since 0.1.0 @category Models */
export interface Tool<A = unknown> {
  readonly name: string
  readonly description: string
  /** JSON Schema of the parameters, as sent to the model. */
  readonly parameters: Record<string, unknown>
  readonly risk: Risk
  readonly category: string
  readonly timeout: Duration.Duration
  /** Largest output (in characters) the model gets back; the rest is cut and marked. */
  readonly outputBudget: number
  readonly idempotency: Idempotency
  /** The sandbox tier of the processes this tool starts (absent: it starts none, or says nothing). */
  readonly sandbox?: SandboxTier | undefined
  /**
   * The tool answers at once from the process's own memory or clock: no I/O, no side effect, nothing
   * outside the process sees it run. A low-risk, idempotent instant tool that its policy allows
   * commits its decision, start and result in one append after it ran (nothing outside the process
   * can tell it ran before that commit); every other tool's decision and start are committed before
   * it runs. Declare it only for such tools (`time.now`); absent: false.
   */
  readonly instant?: boolean | undefined
  /** Validate raw arguments from the model. */
  readonly decode: (args: unknown) => Effect.Effect<A, ToolError>
  readonly execute: (args: A, context: ToolContext) => Effect.Effect<unknown, ToolError>
}

/** @since 0.1.0 @category Models */
// biome-ignore lint/suspicious/noExplicitAny: a catalog holds tools of different argument types
export type AnyTool = Tool<any>

/** Common options of `make` and `fromJsonSchema`. @since 0.1.0 @category Models */
export interface ToolOptions<A> {
  readonly description: string
  readonly risk?: Risk | undefined
  readonly category?: string | undefined
  readonly timeout?: Duration.DurationInput | undefined
  readonly outputBudget?: number | undefined
  readonly idempotency?: Idempotency | undefined
  readonly sandbox?: SandboxTier | undefined
  /** See `Tool.instant`. */
  readonly instant?: boolean | undefined
  readonly execute: (args: A, context: ToolContext) => Effect.Effect<unknown, ToolError>
}

const defaults = {
  risk: "sensitive" as Risk,
  category: "general",
  timeout: "30 seconds" as Duration.DurationInput,
  outputBudget: 16_000
}

/**
 * A tool whose parameters are an Effect `Schema`. Risk defaults to `sensitive` (needs approval
 * under the default policies): declare `low` only for read-only, side-effect-free tools.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = <S extends Schema.Schema.AnyNoContext>(
  name: string,
  options: ToolOptions<Schema.Schema.Type<S>> & { readonly parameters: S }
): Tool<Schema.Schema.Type<S>> => {
  const tool = makeLazy(name, options)
  // Built here, so a schema JSON Schema cannot express throws at definition.
  void tool.parameters
  return tool
}

/**
 * `make`, with the parameters' JSON Schema built on its first read and the decoder on the first
 * `decode` (each once, then kept): the same values, without their cost when the tool is defined —
 * the built-in tools are defined while the daemon starts, and their JSON Schema is first read on the
 * first model call. A schema JSON Schema cannot express throws at that first read instead of here,
 * so use it only for schemas known to be expressible (the built-in tools': tested).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeLazy = <S extends Schema.Schema.AnyNoContext>(
  name: string,
  options: ToolOptions<Schema.Schema.Type<S>> & { readonly parameters: S }
): Tool<Schema.Schema.Type<S>> => {
  let decoder: ((u: unknown) => Effect.Effect<Schema.Schema.Type<S>, ParseResult.ParseError>) | undefined
  let jsonSchema: Record<string, unknown> | undefined
  return {
    name,
    description: options.description,
    get parameters() {
      jsonSchema ??= JSONSchema.make(options.parameters) as unknown as Record<string, unknown>
      return jsonSchema
    },
    risk: options.risk ?? defaults.risk,
    category: options.category ?? defaults.category,
    timeout: Duration.decode(options.timeout ?? defaults.timeout),
    outputBudget: options.outputBudget ?? defaults.outputBudget,
    idempotency: options.idempotency ?? "atMostOnce",
    sandbox: options.sandbox,
    instant: options.instant,
    decode: (args) => {
      decoder ??= Schema.decodeUnknown(options.parameters, { errors: "all", onExcessProperty: "error" })
      return decoder(args).pipe(
        Effect.mapError(
          (e) =>
            new ToolError({
              tool: name,
              reason: "invalid_arguments",
              message: ParseResult.TreeFormatter.formatErrorSync(e)
            })
        )
      )
    },
    execute: options.execute
  }
}

/**
 * A tool whose parameters are a JSON Schema object (draft 2020-12, or draft-07 when `$schema`
 * says so), compiled once here with Ajv and `ajv-formats`: `$ref`/`$defs`, `allOf`, `anyOf`,
 * `oneOf`, `not`, `if`/`then`/`else`, `format` and the rest all apply. Arguments that do not match
 * fail with `ToolError` reason `invalid_arguments` listing every offending path, and `execute`
 * does not run. A schema Ajv rejects in strict mode (unknown keyword or format, unresolved
 * `$ref`, unsupported `$schema`) throws `InvalidArgument` here, at definition.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const fromJsonSchema = <A = Record<string, unknown>>(
  name: string,
  options: ToolOptions<A> & { readonly parameters: Record<string, unknown> }
): Tool<A> => {
  let validate: ReturnType<typeof compile>
  try {
    validate = compile(options.parameters)
  } catch (cause) {
    throw new InvalidArgument({
      field: "parameters",
      message: `tool ${name}: invalid parameters schema: ${cause instanceof Error ? cause.message : String(cause)}`
    })
  }
  const invalid = (message: string) => new ToolError({ tool: name, reason: "invalid_arguments", message })
  return {
    name,
    description: options.description,
    parameters: options.parameters,
    risk: options.risk ?? defaults.risk,
    category: options.category ?? defaults.category,
    timeout: Duration.decode(options.timeout ?? defaults.timeout),
    outputBudget: options.outputBudget ?? defaults.outputBudget,
    idempotency: options.idempotency ?? "atMostOnce",
    sandbox: options.sandbox,
    instant: options.instant,
    decode: (args) =>
      Effect.try({
        try: () => validate(args),
        catch: (cause) => invalid(`could not validate: ${cause instanceof Error ? cause.message : String(cause)}`)
      }).pipe(
        Effect.flatMap((errors) =>
          errors.length === 0 ? Effect.succeed(args as A) : Effect.fail(invalid(errors.join("\n")))
        )
      ),
    execute: options.execute
  }
}

/** @since 0.1.0 @category Models */
export interface ToolOutcome {
  readonly output: string
  readonly truncated: boolean
}

/** @since 0.1.0 @category Models */
export interface Service {
  readonly specs: ReadonlyArray<ToolSpec>
  readonly get: (name: string) => Option.Option<AnyTool>
  /** Decode, run with the tool's timeout, render and cut the output to the tool's budget. */
  readonly execute: (tool: AnyTool, args: unknown, context: ToolContext) => Effect.Effect<ToolOutcome, ToolError>
}

/** @since 0.1.0 @category Tags */
export class ToolRuntime extends Context.Tag("@palyra/core/ToolRuntime")<ToolRuntime, Service>() {}

/** Render a tool's return value as the text the model reads. @since 0.1.0 @category Utils */
export const renderOutput = (value: unknown): string =>
  typeof value === "string" ? value : value === undefined ? "" : JSON.stringify(value, null, 0)

/** Cut text to a budget of characters, marking the cut. @since 0.1.0 @category Utils */
export const truncate = (text: string, budget: number): ToolOutcome =>
  text.length <= budget
    ? { output: text, truncated: false }
    : { output: `${text.slice(0, budget)}\n…[truncated ${text.length - budget} characters]`, truncated: true }

/** @since 0.1.0 @category Constructors */
export const makeRuntime = (tools: ReadonlyArray<AnyTool>): Service => {
  const byName = new Map<string, AnyTool>()
  for (const t of tools) {
    if (byName.has(t.name)) throw new Error(`duplicate tool name: ${t.name}`)
    byName.set(t.name, t)
  }
  return {
    // `parameters` read through, not copied: a lazily built JSON Schema (`makeLazy`) stays unbuilt
    // until the first model call reads the specs.
    specs: tools.map((t) => ({
      name: t.name,
      description: t.description,
      get parameters() {
        return t.parameters
      }
    })),
    get: (name) => Option.fromNullable(byName.get(name)),
    execute: (tool, args, context) => {
      const call = Effect.flatMap(tool.decode(args), (decoded) => tool.execute(decoded, context))
      const timeout = {
        duration: tool.timeout,
        onTimeout: () =>
          new ToolError({
            tool: tool.name,
            reason: "timeout",
            message: `timed out after ${Duration.format(tool.timeout)}`
          })
      }
      const render = (value: unknown) => truncate(renderOutput(value), tool.outputBudget)
      // One read of the caller's fiber decides the span (none when no tracer is installed) and gives
      // the timeout its clock and runtime; with a tracer, the timed call runs inside the span.
      return Effect.withFiberRuntime<ToolOutcome, ToolError>((fiber, status) =>
        isTracing(fiber.currentTracer)
          ? Effect.withSpan(Effect.map(timeoutFail(timeout)(call), render), "ToolRuntime.execute", {
              attributes: { tool: tool.name },
              captureStackTrace: false
            })
          : Effect.map(timeoutFailOn(fiber, status, timeout, call), render)
      )
    }
  }
}

/** @since 0.1.0 @category Layers */
export const layer = (tools: ReadonlyArray<AnyTool>): Layer.Layer<ToolRuntime> =>
  Layer.sync(ToolRuntime, () => makeRuntime(tools))

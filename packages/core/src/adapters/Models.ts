/**
 * Models by name, for configuration files and the daemon:
 *
 * | spec | provider | key from |
 * |---|---|---|
 * | `openai:gpt-4.1-mini` | `@ai-sdk/openai` | `OPENAI_API_KEY` (`OPENAI_BASE_URL` optional) |
 * | `anthropic:claude-sonnet-4-5` | `@ai-sdk/anthropic` | `ANTHROPIC_API_KEY` |
 * | `openai-compatible:http://127.0.0.1:11434/v1#llama3.2` | `@ai-sdk/openai-compatible` (Ollama, vLLM, llama.cpp) | `OPENAI_COMPATIBLE_API_KEY` (optional) |
 * | `demo:scripted` | the offline demo (a scripted model; no network, no key) | – |
 *
 * Several specs (an array, or comma-separated) fail over in order. A missing key is an error at
 * start-up that names the variable.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { InvalidArgument } from "../domain/Errors.js"
import type { Service } from "../ports/ModelProvider.js"
import type * as AiSdkModel from "./ai-sdk/AiSdkModel.js"
import type { Embedder } from "./memory/Embeddings.js"
import * as ScriptedModel from "./ScriptedModel.js"

/** @since 0.1.0 @category Models */
export type ModelSpec =
  | { readonly provider: "openai"; readonly model: string }
  | { readonly provider: "anthropic"; readonly model: string }
  | { readonly provider: "openai-compatible"; readonly baseURL: string; readonly model: string }
  | { readonly provider: "demo"; readonly model: string }

/** @since 0.1.0 @category Parsing */
export const parse = (spec: string): Effect.Effect<ModelSpec, InvalidArgument> => {
  const i = spec.indexOf(":")
  const fail = (message: string) => Effect.fail(new InvalidArgument({ message, field: "model" }))
  if (i <= 0) return fail(`model "${spec}" must look like provider:model (e.g. openai:gpt-4.1-mini)`)
  const provider = spec.slice(0, i)
  const rest = spec.slice(i + 1)
  if (rest.length === 0) return fail(`model "${spec}" names no model after "${provider}:"`)
  switch (provider) {
    case "openai":
    case "anthropic":
    case "demo":
      return Effect.succeed({ provider, model: rest })
    case "openai-compatible": {
      const hash = rest.lastIndexOf("#")
      if (hash <= 0 || hash === rest.length - 1) {
        return fail(`model "${spec}" must look like openai-compatible:<baseURL>#<model>`)
      }
      const baseURL = rest.slice(0, hash)
      if (!/^https?:\/\//.test(baseURL)) return fail(`model "${spec}": base URL must start with http:// or https://`)
      return Effect.succeed({ provider, baseURL, model: rest.slice(hash + 1) })
    }
    default:
      return fail(`model "${spec}": unknown provider "${provider}" (openai, anthropic, openai-compatible, demo)`)
  }
}

const requireEnv = (env: Record<string, string | undefined>, name: string, spec: string) => {
  const value = env[name]
  return value === undefined || value.length === 0
    ? Effect.fail(
        new InvalidArgument({ message: `model ${spec} needs the environment variable ${name} (not set)`, field: name })
      )
    : Effect.succeed(value)
}

// The AI SDK adapter (and the `ai` package behind it) loads only when a real model is configured,
// so a daemon on the offline demo starts without it.
const adapter = Effect.promise(() => import("./ai-sdk/AiSdkModel.js"))

// The providers' `fetch` over undici's `request` (`ai-sdk/Fetch.ts`); none when a proxy is configured.
const fastFetch = (env: Record<string, string | undefined>) =>
  Effect.map(
    Effect.promise(() => import("./ai-sdk/Fetch.js")),
    (m) => {
      const f = m.make(env)
      return f === undefined ? {} : { fetch: f }
    }
  )

const load = <A>(pkg: string, spec: string, f: () => Promise<A>) =>
  Effect.tryPromise({
    try: f,
    catch: () =>
      new InvalidArgument({
        message: `model ${spec} needs the package ${pkg}: install it next to Palyra`,
        field: "model"
      })
  })

/**
 * A `ModelProvider` for one spec.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const fromSpec = (
  spec: string,
  env: Record<string, string | undefined> = process.env,
  options: AiSdkModel.Options = {}
): Effect.Effect<Service, InvalidArgument> =>
  Effect.gen(function* () {
    const parsed = yield* parse(spec)
    switch (parsed.provider) {
      case "demo":
        if (parsed.model !== "scripted") {
          return yield* new InvalidArgument({
            message: `unknown demo model "${parsed.model}" (demo:scripted)`,
            field: "model"
          })
        }
        return ScriptedModel.make(ScriptedModel.demoScript, { name: "demo:scripted", recordPrompts: false })
      case "openai": {
        const apiKey = yield* requireEnv(env, "OPENAI_API_KEY", spec)
        const { createOpenAI } = yield* load("@ai-sdk/openai", spec, () => import("@ai-sdk/openai"))
        const provider = createOpenAI({
          apiKey,
          ...(env.OPENAI_BASE_URL ? { baseURL: env.OPENAI_BASE_URL } : {}),
          ...(yield* fastFetch(env))
        })
        return (yield* adapter).make(provider(parsed.model), { name: spec, ...options })
      }
      case "anthropic": {
        const apiKey = yield* requireEnv(env, "ANTHROPIC_API_KEY", spec)
        const mod = yield* load("@ai-sdk/anthropic", spec, () => import("@ai-sdk/anthropic" as string))
        const provider = (mod as { createAnthropic: (o: { apiKey: string }) => (m: string) => never }).createAnthropic({
          apiKey
        })
        return (yield* adapter).make(provider(parsed.model), { name: spec, ...options })
      }
      case "openai-compatible": {
        const { createOpenAICompatible } = yield* load(
          "@ai-sdk/openai-compatible",
          spec,
          () => import("@ai-sdk/openai-compatible")
        )
        const apiKey = env.OPENAI_COMPATIBLE_API_KEY
        const provider = createOpenAICompatible({
          name: "openai-compatible",
          baseURL: parsed.baseURL,
          includeUsage: true,
          ...(apiKey ? { apiKey } : {}),
          ...(yield* fastFetch(env))
        })
        return (yield* adapter).make(provider.chatModel(parsed.model), { name: spec, ...options })
      }
    }
  })

/**
 * Models for a list of specs (or one comma-separated string), failing over in order.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const fromSpecs = (
  specs: string | ReadonlyArray<string>,
  env: Record<string, string | undefined> = process.env,
  options: AiSdkModel.Options = {}
): Effect.Effect<Service, InvalidArgument> => {
  const list = (typeof specs === "string" ? specs.split(",") : specs).map((s) => s.trim()).filter((s) => s.length > 0)
  if (list.length === 0) return Effect.fail(new InvalidArgument({ message: "no model configured", field: "model" }))
  return Effect.flatMap(
    Effect.forEach(list, (s) => fromSpec(s, env, options)),
    (models) => (models.length === 1 ? Effect.succeed(models[0]!) : Effect.map(adapter, (a) => a.failover(models)))
  )
}

/**
 * An embedder (for memory vectors, `Embeddings.withVectors`) from a spec: `openai:<model>` (e.g.
 * `openai:text-embedding-3-small`, key from `OPENAI_API_KEY`) or
 * `openai-compatible:<baseURL>#<model>` (Ollama, vLLM, llama.cpp, e.g. `#nomic-embed-text`).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const embedderFromSpec = (
  spec: string,
  env: Record<string, string | undefined> = process.env
): Effect.Effect<Embedder, InvalidArgument> =>
  Effect.gen(function* () {
    const parsed = yield* parse(spec)
    const { AiSdkEmbedder } = yield* Effect.promise(() => import("../ai-sdk.js"))
    switch (parsed.provider) {
      case "openai": {
        const apiKey = yield* requireEnv(env, "OPENAI_API_KEY", spec)
        const { createOpenAI } = yield* load("@ai-sdk/openai", spec, () => import("@ai-sdk/openai"))
        const provider = createOpenAI({ apiKey, ...(env.OPENAI_BASE_URL ? { baseURL: env.OPENAI_BASE_URL } : {}) })
        return AiSdkEmbedder.make(provider.embeddingModel(parsed.model), { name: spec })
      }
      case "openai-compatible": {
        const { createOpenAICompatible } = yield* load(
          "@ai-sdk/openai-compatible",
          spec,
          () => import("@ai-sdk/openai-compatible")
        )
        const apiKey = env.OPENAI_COMPATIBLE_API_KEY
        const provider = createOpenAICompatible({
          name: "openai-compatible",
          baseURL: parsed.baseURL,
          ...(apiKey ? { apiKey } : {})
        })
        return AiSdkEmbedder.make(provider.embeddingModel(parsed.model), { name: spec })
      }
      default:
        return yield* new InvalidArgument({
          message: `embedding model ${spec}: use openai:<model> or openai-compatible:<baseURL>#<model>`,
          field: "embedding_model"
        })
    }
  })

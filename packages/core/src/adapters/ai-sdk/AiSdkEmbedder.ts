/**
 * An `Embeddings.Embedder` over any AI SDK embedding model (the AI SDK's `embedMany`): OpenAI,
 * an OpenAI-compatible server (Ollama, vLLM, llama.cpp), and every other provider the AI SDK has.
 *
 * ```ts
 * import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
 * const provider = createOpenAICompatible({ name: "local", baseURL: "http://127.0.0.1:11434/v1" })
 * const store = Embeddings.withVectors(store, { embedder: AiSdkEmbedder.make(provider.embeddingModel("nomic-embed-text")) })
 * ```
 *
 * @since 0.1.0
 */
import { embedMany } from "ai"
import { Effect } from "effect"
import { ProviderError } from "../../domain/Errors.js"
import type { Embedder } from "../memory/Embeddings.js"

/** What `embedMany` accepts as a model. @since 0.1.0 @category Models */
export type EmbeddingModel = Parameters<typeof embedMany>[0]["model"]

/** @since 0.1.0 @category Models */
export interface Options {
  /** The name recorded with each vector (default: the model's id). */
  readonly name?: string | undefined
  /** Give up on one call after this long (default 30 seconds). */
  readonly timeoutMs?: number | undefined
}

/**
 * Embed with an AI SDK embedding model; failures are `ProviderError`s.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (model: EmbeddingModel, options: Options = {}): Embedder => {
  const name = options.name ?? (typeof model === "string" ? model : `${model.provider}:${model.modelId}`)
  return {
    model: name,
    embed: (texts) =>
      Effect.tryPromise({
        try: (signal) =>
          embedMany({
            model,
            values: [...texts],
            maxRetries: 0,
            abortSignal: AbortSignal.any([signal, AbortSignal.timeout(options.timeoutMs ?? 30_000)])
          }).then((r) => r.embeddings),
        catch: (error) =>
          new ProviderError({
            provider: name,
            reason: "unknown",
            retryable: false,
            message: `embedding failed: ${error instanceof Error ? error.message : String(error)}`
          })
      }).pipe(Effect.withSpan("AiSdkEmbedder.embed", { attributes: { texts: texts.length } }))
  }
}

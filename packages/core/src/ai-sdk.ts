/**
 * `@palyra/core/ai-sdk`: a `ModelProvider` over any AI SDK language model (loads `ai`).
 *
 * @since 0.1.0
 */

export * as AiSdkEmbedder from "./adapters/ai-sdk/AiSdkEmbedder.js"
export * as AiSdkModel from "./adapters/ai-sdk/AiSdkModel.js"

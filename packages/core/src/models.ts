/**
 * `@palyra/core/models`: model specs (`openai:gpt-4.1-mini`, `openai-compatible:URL#model`,
 * `demo:scripted`, …) to `ModelProvider`s. The AI SDK is imported only when a spec needs it.
 *
 * @since 0.1.0
 */
export * as Models from "./adapters/Models.js"

/**
 * What a model can take: its context window, the tokens to keep free for its answer (the output
 * reserve) and the encoding to count with. Known model families have defaults; anything can be
 * overridden, and an unknown model gets a small, safe window.
 *
 * | model (after the `provider:` prefix) | window | output reserve | encoding | images |
 * |---|---|---|---|---|
 * | `gpt-4.1*` | 1,047,576 | 32,768 | o200k_base | yes |
 * | `gpt-5*` | 400,000 | 32,768 | o200k_base | yes |
 * | `gpt-4o*`, `chatgpt-4o*` | 128,000 | 16,384 | o200k_base | yes |
 * | `o1*`, `o3*`, `o4*` (reasoning) | 200,000 | 32,768 | o200k_base | yes |
 * | `gpt-oss*` | 131,072 | 16,384 | o200k_base | no |
 * | `gpt-4-turbo*`, `gpt-4-1106*`, `gpt-4-0125*` | 128,000 | 4,096 | cl100k_base | yes |
 * | `gpt-4*` (others) | 8,192 | 1,024 | cl100k_base | no |
 * | `gpt-3.5*` | 16,385 | 4,096 | cl100k_base | no |
 * | `claude-*` | 200,000 | 8,192 | approximate | yes |
 * | `llama3.2-vision*`, `llava*` (local vision models) | 8,192 | 1,024 | approximate | yes |
 * | `llama3.1*`…`llama4*` (hosted) | 131,072 | 4,096 | approximate | `llama4` only |
 * | `llama*` (others, e.g. a local server's default) | 8,192 | 1,024 | approximate | no |
 * | `demo:scripted` / `scripted` | 8,192 | 1,024 | approximate | no |
 * | anything else | 8,192 | 1,024 | approximate | no |
 *
 * Local servers (Ollama, llama.cpp, vLLM) often serve a smaller window than the model supports: set
 * `contextWindow` to the server's `num_ctx`, and `images` to whether the served model takes images.
 *
 * @since 0.1.0
 */
import type { Encoding } from "./Tokenizer.js"

/** @since 0.1.0 @category Models */
export interface Limits {
  readonly contextWindow: number
  readonly outputReserve: number
  readonly encoding: Encoding
  /** Whether the model accepts images in user messages. */
  readonly images: boolean
}

/** Overrides of the table. @since 0.1.0 @category Models */
export interface Overrides {
  readonly contextWindow?: number | undefined
  readonly outputReserve?: number | undefined
  readonly encoding?: Encoding | undefined
  readonly images?: boolean | undefined
}

const table: ReadonlyArray<readonly [RegExp, Limits]> = [
  [/^gpt-4\.1/, { contextWindow: 1_047_576, outputReserve: 32_768, encoding: "o200k_base", images: true }],
  [/^gpt-5/, { contextWindow: 400_000, outputReserve: 32_768, encoding: "o200k_base", images: true }],
  [
    /^(chatgpt-)?gpt-4o|^chatgpt-4o/,
    { contextWindow: 128_000, outputReserve: 16_384, encoding: "o200k_base", images: true }
  ],
  [/^o[134](-|$)/, { contextWindow: 200_000, outputReserve: 32_768, encoding: "o200k_base", images: true }],
  [/^gpt-oss/, { contextWindow: 131_072, outputReserve: 16_384, encoding: "o200k_base", images: false }],
  [/^gpt-4-(turbo|1106|0125)/, { contextWindow: 128_000, outputReserve: 4_096, encoding: "cl100k_base", images: true }],
  [/^gpt-4/, { contextWindow: 8_192, outputReserve: 1_024, encoding: "cl100k_base", images: false }],
  [/^gpt-3\.5/, { contextWindow: 16_385, outputReserve: 4_096, encoding: "cl100k_base", images: false }],
  [/^claude-/, { contextWindow: 200_000, outputReserve: 8_192, encoding: "approximate", images: true }],
  [
    /^(meta-)?llama-?3\.2-vision|^llava/,
    { contextWindow: 8_192, outputReserve: 1_024, encoding: "approximate", images: true }
  ],
  [/^(meta-)?llama-?4/, { contextWindow: 131_072, outputReserve: 4_096, encoding: "approximate", images: true }],
  [
    /^(meta-)?llama-?3\.[123]/,
    { contextWindow: 131_072, outputReserve: 4_096, encoding: "approximate", images: false }
  ],
  [/^(meta-)?llama/, { contextWindow: 8_192, outputReserve: 1_024, encoding: "approximate", images: false }],
  [/^scripted$/, { contextWindow: 8_192, outputReserve: 1_024, encoding: "approximate", images: false }]
]

/** What an unknown model gets: small and safe. @since 0.1.0 @category Constants */
export const fallback: Limits = { contextWindow: 8_192, outputReserve: 1_024, encoding: "approximate", images: false }

/**
 * The model's id without its provider: `openai:gpt-4.1-mini` → `gpt-4.1-mini`,
 * `openai-compatible:http://host:11434/v1#llama3.1:8b` → `llama3.1:8b`, lower-cased.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const modelId = (name: string): string => {
  const lower = name.trim().toLowerCase()
  const hash = lower.lastIndexOf("#")
  if (hash >= 0) return lower.slice(hash + 1)
  const colon = lower.indexOf(":")
  return colon >= 0 ? lower.slice(colon + 1) : lower
}

/**
 * The limits of a model by name, with overrides applied. A fail-over list (`a,b`) gets the smallest
 * window and the largest reserve of its members, so every member fits.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const limitsFor = (name: string, overrides: Overrides = {}): Limits => {
  const members = name.split(",").filter((s) => s.trim().length > 0)
  const known = (members.length === 0 ? [name] : members).map((m) => {
    const id = modelId(m)
    return table.find(([pattern]) => pattern.test(id))?.[1] ?? fallback
  })
  const base = known.reduce((a, b) => ({
    contextWindow: Math.min(a.contextWindow, b.contextWindow),
    outputReserve: Math.max(a.outputReserve, b.outputReserve),
    encoding: a.encoding === b.encoding ? a.encoding : "approximate",
    images: a.images && b.images
  }))
  return {
    contextWindow: overrides.contextWindow ?? base.contextWindow,
    outputReserve: overrides.outputReserve ?? base.outputReserve,
    encoding: overrides.encoding ?? base.encoding,
    images: overrides.images ?? base.images
  }
}

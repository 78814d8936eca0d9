/**
 * A local server speaking the OpenAI chat-completions SSE wire, for tests of the AI SDK adapter over
 * a real AI SDK client (`@ai-sdk/openai-compatible`): the chunks it writes, and the server itself,
 * scoped to an effect.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { Effect } from "effect"
import { AiSdkModel } from "../src/ai-sdk.js"
import type { ModelProvider } from "../src/index.js"

/** One chat-completions stream chunk (model `m`), as an SSE frame. */
export const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`

/** The usage chunk, as an SSE frame. */
export const usage = (p: number, c: number) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c } })}\n\n`

/** The server as a test sees it. */
export interface ChatServer {
  /** The adapter over a real AI SDK client for this server (no retries unless `options` say so). */
  readonly model: (options?: AiSdkModel.Options) => ModelProvider.Service
  /** Per request, in order: whether its response closed before it was finished (the client aborted). */
  readonly closedEarly: Array<boolean>
}

/**
 * Run `f` against a server on 127.0.0.1 whose every request is answered by `respond` (called once
 * the request's body is read, after a 200 with `text/event-stream`); closed afterwards, connections
 * and all.
 */
export const withChatServer = <A, E>(
  respond: (res: ServerResponse) => void,
  f: (server: ChatServer) => Effect.Effect<A, E>
) =>
  Effect.acquireUseRelease(
    Effect.promise(
      () =>
        new Promise<{ server: Server; local: ChatServer }>((resolve) => {
          const closedEarly: Array<boolean> = []
          const server = createServer((req: IncomingMessage, res: ServerResponse) => {
            req.resume()
            req.on("end", () => {
              const index = closedEarly.push(false) - 1
              res.on("close", () => {
                if (!res.writableFinished) closedEarly[index] = true
              })
              res.writeHead(200, { "content-type": "text/event-stream" })
              respond(res)
            })
          })
          server.listen(0, "127.0.0.1", () => {
            const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
            const model = (options: AiSdkModel.Options = {}) =>
              AiSdkModel.make(
                createOpenAICompatible({ name: "local", baseURL: url, includeUsage: true }).chatModel("m"),
                { retry: { times: 0 }, ...options }
              )
            resolve({ server, local: { model, closedEarly } })
          })
        })
    ),
    ({ local }) => f(local),
    ({ server }) =>
      Effect.promise(
        () =>
          new Promise<void>((r) => {
            server.closeAllConnections()
            server.close(() => r())
          })
      )
  )

/**
 * OpenAI-compatible Chat Completions over a Palyra session.
 *
 * - The session: `x-palyra-session`, else `user`, else a fresh session per request.
 * - Only the last user message is sent into the session (its history comes from the session).
 *   With `x-palyra-stateless: true` a fresh session is used and the earlier messages are passed as
 *   context text ahead of the last one.
 * - `model` names the agent when it is one (`GET /v1/agents`); any other name (clients often send a
 *   provider's model name) leaves the choice to the session (its agent, or for a new session the
 *   default). The name is recorded as the new session's channel (`openai:<model>`) and echoed back.
 * - Tools run inside Palyra under its policy. An approval wait streams a notice
 *   (`[waiting for approval <id> of <tool>]`); once the approval is resolved (e.g. over
 *   `POST /v1/approvals/:id`) the same response continues. If the answer takes longer than the
 *   chat timeout, the response ends cleanly (`finish_reason: "stop"`) with a notice; the run goes on.
 */
import type { HttpServerRequest } from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Errors, type Follower, type Gateway, Metrics, type Records, type TapeEvent } from "@palyra/core"
import { Clock, Effect, Option, Stream } from "effect"
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  ChatCompletionRequest,
  type ChatMessage,
  CurrentCaller
} from "../Api.js"
import * as Sse from "../Sse.js"
import { readJson } from "./body.js"
import { type HandlerOptions, keepAlive, sseResponse } from "./common.js"
import { followerEvents } from "./followerStream.js"
import { openAiErrorResponse } from "./openaiErrors.js"
import { nodeResponse, SSE_HEADERS, streamedStart, writeFrames } from "./startStream.js"

type Message = typeof ChatMessage.Type
type Chunk = typeof ChatCompletionChunk.Encoded

const invalid = (message: string, field: string) => new Errors.InvalidArgument({ message, field })

/** The text of a message's content (text parts joined; other parts ignored). */
const contentText = (content: Message["content"]): string =>
  content === undefined || content === null
    ? ""
    : typeof content === "string"
      ? content
      : content.flatMap((part) => (part.type === "text" && typeof part.text === "string" ? [part.text] : [])).join("")

/** Earlier messages as context text ahead of the last one (stateless mode). */
const withContext = (messages: ReadonlyArray<Message>, last: string): string => {
  const earlier = messages.slice(0, -1).map((m) => `${m.role}: ${contentText(m.content)}`)
  return earlier.length === 0
    ? last
    : `[Earlier messages in this conversation]\n${earlier.join("\n")}\n[End of earlier messages]\n\n${last}`
}

/** What one tape event adds to the answer: model text, or a notice for a human. */
const piece = (event: TapeEvent.TapeEvent): string | undefined => {
  switch (event._tag) {
    case "AssistantDelta":
      return event.text
    case "ApprovalRequested":
      return `\n[waiting for approval ${event.approvalId} of ${event.tool}]\n`
    case "ApprovalResolved":
      return `[approval ${event.approvalId} ${event.decision}]\n`
    case "RunError":
      return `\n[run failed: ${event.code}: ${event.message}]`
    case "RunStateChanged":
      return event.to === "Cancelled" ? "\n[run cancelled]" : undefined
    default:
      return undefined
  }
}

interface Answer {
  /** The answer's pieces, then a notice if it stopped before the run ended. */
  readonly pieces: Stream.Stream<string>
  readonly usage: () => { prompt_tokens: number; completion_tokens: number; total_tokens: number }
}

const follow = (
  events: Stream.Stream<TapeEvent.TapeEvent, Errors.JournalError | Errors.StreamLagged>,
  run: Records.Run,
  options: HandlerOptions
): Answer => {
  const usage = { prompt_tokens: 0, completion_tokens: 0 }
  let ended = false
  let stopped: "timeout" | "shutdown" | undefined
  const stop = Effect.raceFirst(
    Effect.as(Effect.sleep(`${options.chatTimeoutSeconds} seconds`), "timeout" as const),
    Effect.as(options.shutdown, "shutdown" as const)
  ).pipe(Effect.tap((why) => Effect.sync(() => (stopped = why))))
  const pieces = events.pipe(
    Stream.interruptWhen(stop),
    Stream.tap((event) =>
      Effect.sync(() => {
        if (event._tag === "Usage") {
          usage.prompt_tokens += event.inputTokens
          usage.completion_tokens += event.outputTokens
        }
        if (
          event._tag === "RunStateChanged" &&
          (event.to === "Done" || event.to === "Failed" || event.to === "Cancelled")
        ) {
          ended = true
        }
      })
    ),
    Stream.filterMap((event) => Option.fromNullable(piece(event))),
    Stream.catchAllCause((cause) =>
      Stream.fromEffect(Effect.as(Effect.logError("chat stream failed", cause), "\n[internal error]"))
    ),
    Stream.concat(
      Stream.suspend(() => {
        if (ended) return Stream.empty
        const where = `run ${run.id} continues in session ${run.sessionId}`
        return Stream.make(
          stopped === "shutdown"
            ? `\n[the server is shutting down; ${where}]`
            : `\n[timed out after ${options.chatTimeoutSeconds}s; ${where}]`
        )
      })
    )
  )
  return { pieces, usage: () => ({ ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens }) }
}

/** The `chatCompletions` handler: always answers, errors in OpenAI's shape. @internal */
export const chatCompletions =
  (gateway: Gateway.Service, options: HandlerOptions) =>
  ({
    headers,
    request
  }: {
    readonly headers: {
      readonly "x-palyra-session"?: string | undefined
      readonly "x-palyra-stateless"?: string | undefined
    }
    readonly request: HttpServerRequest
  }) =>
    Effect.gen(function* () {
      const caller = yield* CurrentCaller
      const body = yield* readJson(ChatCompletionRequest, options.limits, { strict: false })
      const sessionHeader = headers["x-palyra-session"]
      if (sessionHeader !== undefined && (sessionHeader.length === 0 || sessionHeader.length > 512)) {
        return yield* invalid("x-palyra-session must be 1 to 512 characters", "x-palyra-session")
      }
      const statelessHeader = headers["x-palyra-stateless"]?.toLowerCase()
      if (statelessHeader !== undefined && statelessHeader !== "true" && statelessHeader !== "false") {
        return yield* invalid("x-palyra-stateless must be true or false", "x-palyra-stateless")
      }
      const last = body.messages[body.messages.length - 1]
      if (last === undefined || last.role !== "user") {
        return yield* invalid("the last message must be a user message", "messages")
      }
      const text = contentText(last.content)
      if (text.trim() === "") return yield* invalid("the last user message has no text", "messages")
      const stateless = statelessHeader === "true"
      const agents = yield* gateway.listAgents(caller)
      const message: Gateway.MessageRequest = {
        text: stateless ? withContext(body.messages, text) : text,
        key: stateless ? undefined : (sessionHeader ?? body.user),
        channel: `openai:${body.model}`,
        agent: agents.some((a) => a.id === body.model) ? body.model : undefined
      }
      // The run's follower is attached before its first commit (nothing read back); it lives in the
      // request's scope, closed once the response is written or the client is gone.
      const start = (attached?: (follower: Follower.Follower, run: Records.Run) => void) =>
        gateway
          .startRunFollowing(caller, message, { attached })
          .pipe(Effect.tap((started) => Effect.annotateCurrentSpan({ model: body.model, runId: started.run.id })))
      const created = Math.floor((yield* Clock.currentTimeMillis) / 1000)

      if (body.stream !== true) {
        const started = yield* start()
        const answer = follow(followerEvents(started.follower), started.run, options)
        const pieces = yield* Stream.runCollect(answer.pieces)
        const completion: typeof ChatCompletion.Encoded = {
          id: `chatcmpl-${started.run.id}`,
          object: "chat.completion",
          created,
          model: body.model,
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: Array.from(pieces).join(""), refusal: null },
              logprobs: null,
              finish_reason: "stop"
            }
          ],
          usage: answer.usage()
        }
        return HttpServerResponse.unsafeJson(completion)
      }

      const includeUsage = body.stream_options?.include_usage === true
      const chunk = (id: string, delta: Chunk["choices"][number]["delta"], finish: "stop" | null): Chunk => ({
        id,
        object: "chat.completion.chunk",
        created,
        model: body.model,
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
        ...(includeUsage ? { usage: null } : {})
      })
      const frame = (data: unknown) => Sse.encode({ data: JSON.stringify(data) })
      const first = (id: string) => frame(chunk(id, { role: "assistant", content: "" }, null))
      // Everything after the first chunk; comments keep a long approval wait from looking idle
      // (OpenAI's clients skip them). Shutdown ends `answer.pieces` with a notice, so the closing
      // frames are still sent.
      const rest = (id: string, answer: Answer) =>
        Stream.merge(
          Stream.map(answer.pieces, (content) => frame(chunk(id, { content }, null))).pipe(
            Stream.concat(
              Stream.suspend(() =>
                Stream.make(
                  frame(chunk(id, {}, "stop")),
                  ...(includeUsage
                    ? [
                        frame({
                          id,
                          object: "chat.completion.chunk",
                          created,
                          model: body.model,
                          choices: [],
                          usage: answer.usage()
                        })
                      ]
                    : []),
                  Sse.encode({ data: "[DONE]" })
                )
              )
            )
          ),
          keepAlive(options),
          { haltStrategy: "left" }
        )

      const res = nodeResponse(options, request)
      if (res === undefined) {
        const started = yield* start()
        const id = `chatcmpl-${started.run.id}`
        const answer = follow(followerEvents(started.follower), started.run, options)
        return sseResponse(Stream.concat(Stream.make(first(id)), rest(id, answer)))
      }
      // Served by Node: the head and the first chunk leave inside the start commit's publication
      // (its events, which carry no text, are folded into the answer first), not when the call returns.
      let begun: { readonly id: string; readonly answer: Answer } | undefined
      return yield* streamedStart(res, {
        start,
        begun: () => begun !== undefined,
        begin: (follower, taken, run) => {
          const id = `chatcmpl-${run.id}`
          const events = followerEvents(follower)
          begun = {
            id,
            answer: follow(taken.length > 0 ? Stream.concat(Stream.fromIterable(taken), events) : events, run, options)
          }
          res.writeHead(200, SSE_HEADERS)
          res.write(first(id))
        },
        rest: (failed) =>
          Effect.suspend(() => {
            // Failed after its start commit: the response ends after the first chunk (the run goes on).
            if (failed || begun === undefined) return Effect.sync(() => res.end())
            return writeFrames(res, Metrics.trackOpenStream("http")(rest(begun.id, begun.answer)))
          })
      })
    }).pipe(Effect.catchAll(openAiErrorResponse))

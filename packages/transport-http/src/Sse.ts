/**
 * Server-sent events: the frames this server writes, and one parser (`eventsource-parser`, the
 * maintained, spec-following parser the AI SDK and OpenAI's client also use) for every client —
 * the CLI, tests and embedders.
 *
 * ```ts
 * import { Sse } from "@palyra/transport-http"
 * for await (const event of Sse.fromResponse(await fetch(url, { headers }))) console.log(event.id, event.data)
 * ```
 *
 * @since 0.1.0
 */

import { Effect, Stream } from "effect"
import { createParser, type EventSourceMessage } from "eventsource-parser"

/** One server-sent event. @since 0.1.0 @category Models */
export interface Event {
  /** The `id` field (for Palyra's tape streams: the tape sequence). */
  readonly id?: string | undefined
  /** The `event` field (for Palyra's tape streams: the event tag). */
  readonly event?: string | undefined
  readonly data: string
}

const encoder = new TextEncoder()
const LINE_BREAK = /[\r\n]/
const LINE_BREAKS = /[\r\n]/g
/** A field value on one line (a test first: the common value has no line break and is kept as is). */
const oneLine = (value: string) => (LINE_BREAK.test(value) ? value.replace(LINE_BREAKS, "") : value)

/**
 * One event as bytes. `data` may span lines; `id` and `event` must not contain line breaks.
 *
 * @since 0.1.0
 * @category Encoding
 */
export const encode = (event: Event): Uint8Array => {
  let frame = ""
  if (event.id !== undefined) frame += `id: ${oneLine(event.id)}\n`
  if (event.event !== undefined) frame += `event: ${oneLine(event.event)}\n`
  // Data with no line break (every JSON text: `JSON.stringify` escapes them) is one `data:` line.
  if (LINE_BREAK.test(event.data)) for (const line of event.data.split(/\r\n|\r|\n/)) frame += `data: ${line}\n`
  else frame += `data: ${event.data}\n`
  // `Buffer.from` (a Uint8Array) takes small frames from Node's pooled slab: no ArrayBuffer per frame.
  return Buffer.from(`${frame}\n`)
}

/** A comment line (ignored by parsers; keeps proxies from closing an idle stream). @since 0.1.0 @category Encoding */
export const comment = (text: string): Uint8Array => encoder.encode(`: ${text.replace(/[\r\n]/g, " ")}\n\n`)

const toEvent = (message: EventSourceMessage): Event => ({
  ...(message.id === undefined ? {} : { id: message.id }),
  ...(message.event === undefined ? {} : { event: message.event }),
  data: message.data
})

/**
 * Parse a byte stream into events (Promise form).
 *
 * @since 0.1.0
 * @category Parsing
 */
export async function* parse(body: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>): AsyncGenerator<Event> {
  const pending: Array<Event> = []
  const parser = createParser({ onEvent: (message) => pending.push(toEvent(message)) })
  const decoder = new TextDecoder()
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    parser.feed(decoder.decode(chunk, { stream: true }))
    while (pending.length > 0) yield pending.shift()!
  }
  parser.feed(decoder.decode())
  while (pending.length > 0) yield pending.shift()!
}

/**
 * The events of a `fetch` response. Breaking out of the loop cancels the response body.
 *
 * @since 0.1.0
 * @category Parsing
 */
export async function* fromResponse(response: Response): AsyncGenerator<Event> {
  if (response.body === null) return
  const reader = response.body.getReader()
  const chunks: AsyncIterable<Uint8Array> = {
    [Symbol.asyncIterator]: () => ({
      next: async () => {
        const { done, value } = await reader.read()
        return done ? { done: true, value: undefined } : { done: false, value }
      }
    })
  }
  try {
    yield* parse(chunks)
  } finally {
    await reader.cancel().catch(() => undefined)
  }
}

/**
 * Parse a byte stream into events (Effect form), e.g. the body of an `HttpClientResponse`.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const decode = <E, R>(bytes: Stream.Stream<Uint8Array, E, R>): Stream.Stream<Event, E, R> =>
  Stream.unwrap(
    Effect.sync(() => {
      const pending: Array<Event> = []
      const parser = createParser({ onEvent: (message) => pending.push(toEvent(message)) })
      const decoder = new TextDecoder()
      const drain = () => pending.splice(0, pending.length)
      return bytes.pipe(
        Stream.mapConcat((chunk) => {
          parser.feed(decoder.decode(chunk, { stream: true }))
          return drain()
        }),
        Stream.concat(
          Stream.suspend(() => {
            parser.feed(decoder.decode())
            return Stream.fromIterable(drain())
          })
        )
      )
    })
  )

/**
 * The fiber's current span in one step, for the admission path. `Effect.currentSpan` builds (and,
 * under `Effect.option`, catches) a `NoSuchElementException` with its stack when there is no span,
 * and `Effect.annotateCurrentSpan` is a context read, a `flatMap`, a `sync` and an `ignore`: ~9 fiber
 * steps and an exception per admission for what is one property read and two `attribute` calls.
 *
 * @internal
 */
import { Context, Effect, Tracer } from "effect"

/** The fiber's current span when it is Effect's own (`Effect.currentSpan`'s answer), else undefined. @internal */
export const currentSpanOrUndefined: Effect.Effect<Tracer.Span | undefined> = Effect.withFiberRuntime((fiber) => {
  const span = fiber.currentSpan
  return Effect.succeed(span !== undefined && span._tag === "Span" ? span : undefined)
})

/**
 * `Effect.annotateCurrentSpan(attributes)` on a span read with `currentSpanOrUndefined`: set on it
 * at once, unless it disables propagation (then `annotateCurrentSpan` annotates an ancestor: left
 * to it, returned as an effect to run).
 * @internal
 */
export const annotateSpan = (
  span: Tracer.Span | undefined,
  attributes: Record<string, unknown>
): Effect.Effect<void> | undefined => {
  if (span === undefined) return undefined
  if (Context.get(span.context, Tracer.DisablePropagation)) return Effect.annotateCurrentSpan(attributes)
  for (const key in attributes) span.attribute(key, attributes[key])
  return undefined
}

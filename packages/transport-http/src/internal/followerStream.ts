/**
 * A core `Follower` as an Effect `Stream` (the OpenAI chat route folds a run's events with Stream
 * operators). The same pull as core's `subscribe` over its follower; the follower is not closed by
 * the stream: whoever opened it (the request's scope, `Gateway.startRunFollowing`) closes it.
 */
import { type Errors, Follower, type TapeEvent } from "@palyra/core"
import { Chunk, Effect, Option, Stream } from "effect"

type Failure = Errors.JournalError | Errors.StreamLagged

/** @internal */
export const followerEvents = (follower: Follower.Follower): Stream.Stream<TapeEvent.TapeEvent, Failure> => {
  const pull: Effect.Effect<Chunk.Chunk<TapeEvent.TapeEvent>, Option.Option<Failure>> = Effect.suspend(() => {
    const r = follower.take()
    if (r === undefined)
      return Effect.async<Chunk.Chunk<TapeEvent.TapeEvent>, Option.Option<Failure>>((resume) => {
        follower.onReady(() => resume(pull))
        return Effect.sync(() => follower.onReady(undefined))
      })
    if (r === Follower.Done) return Effect.fail(Option.none())
    if (Follower.isFailed(r)) return Effect.fail(Option.some(r.failure))
    return Effect.succeed(Chunk.unsafeFromArray(r as Array<TapeEvent.TapeEvent>))
  })
  return Stream.repeatEffectChunkOption(pull)
}

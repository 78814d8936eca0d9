import { type Effect, Metric } from "effect"
import type { Reason } from "../Rejection.js"

/** Messages and requests turned away, by channel and stable reason code. @internal */
export const rejections = Metric.counter("palyra_channel_rejections", {
  description: "Channel messages and requests refused, by channel and reason",
  incremental: true
})

/** Identities paired with a code. @internal */
export const pairings = Metric.counter("palyra_channel_pairings", {
  description: "Platform identities paired with a pairing code, by channel",
  incremental: true
})

/** @internal */
export const recordRejection = (channel: string, reason: Reason): Effect.Effect<void> =>
  Metric.increment(Metric.tagged(Metric.tagged(rejections, "channel", channel), "reason", reason))

/** @internal */
export const recordPairing = (channel: string): Effect.Effect<void> =>
  Metric.increment(Metric.tagged(pairings, "channel", channel))

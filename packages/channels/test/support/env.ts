import { Caller, type Errors, type Gateway, type Journal, type ScriptedModel, type Tool } from "@palyra/core"
import { type GatewayLayerOptions, gatewayLayer } from "@palyra/core/testing"
import { Effect, Layer, Schedule } from "effect"
import {
  ChannelRouter,
  ChannelStore,
  type Connector,
  type InboundMessage,
  Outbox,
  Pairing,
  type Settings
} from "../../src/index.js"

export interface EnvOptions {
  readonly channels: ReadonlyArray<Settings.ChannelSettings>
  readonly model: ScriptedModel.ScriptedModel
  readonly tools?: ReadonlyArray<Tool.AnyTool>
  readonly store?: Layer.Layer<ChannelStore.ChannelStore, unknown>
  readonly connectors?: ReadonlyArray<Connector.Connector>
  readonly maxMessageChars?: number
  readonly journal?: Layer.Layer<Journal.Journal, unknown>
  readonly kernel?: Pick<GatewayLayerOptions, "agents" | "bindings">
}

/** The real kernel (scripted model, in-memory journal) + a channel store + outbox + router + pairing. */
export const channelsEnv = (options: EnvOptions) => {
  const kernel = gatewayLayer({
    ...options.kernel,
    model: options.model,
    tools: options.tools ?? [],
    ...(options.journal === undefined ? {} : { journal: options.journal }),
    ...(options.maxMessageChars === undefined ? {} : { maxMessageChars: options.maxMessageChars })
  }) as Layer.Layer<Gateway.Gateway>
  const base = Layer.merge(kernel, options.store ?? ChannelStore.layerMemory)
  const outbox = Outbox.layer({ connectors: options.connectors ?? [], pollInterval: "50 millis" }).pipe(
    Layer.provideMerge(base)
  )
  return Layer.mergeAll(ChannelRouter.layer({ channels: options.channels }), Pairing.layer(options.channels)).pipe(
    Layer.provideMerge(outbox)
  )
}

let counter = 0
/** An inbound message with sensible defaults: a verified DM to `tg`. */
export const message = (fields: Partial<InboundMessage.InboundMessage> & { readonly from?: string } = {}) => {
  const { from, ...rest } = fields
  const id = from ?? "1001"
  return {
    channel: "tg",
    account: "bot1",
    conversation: `dm-${id}`,
    sender: { id, handle: `user${id}`, verified: true },
    platformMessageId: `m${++counter}`,
    text: "hello",
    attachments: [],
    isDirect: true,
    mentions: [],
    receivedAt: 1,
    ...rest
  } satisfies InboundMessage.InboundMessage
}

class NotYet {
  readonly _tag = "NotYet"
}

/** Poll with a real delay until `ok` holds (10 s at most); returns the value that satisfied it. */
export const eventually = <A, E, R>(get: Effect.Effect<A, E, R>, ok: (a: A) => boolean, what = "a condition") =>
  get.pipe(
    Effect.filterOrFail(ok, () => new NotYet()),
    Effect.retry({ schedule: Schedule.spaced("10 millis"), while: (e) => e instanceof NotYet }),
    Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error(`timed out waiting for ${what}`) })
  )

export const operator = Caller.operator("op")

/** Texts of the deliveries in the outbox for a conversation, in order. */
export const texts = (
  conversation?: string
): Effect.Effect<Array<string>, Errors.JournalError, ChannelStore.ChannelStore> =>
  Effect.map(ChannelStore.ChannelStore, (store) =>
    store
      .listDeliveries({})
      .pipe(
        Effect.map((ds) =>
          ds.filter((d) => conversation === undefined || d.conversation === conversation).map((d) => d.text)
        )
      )
  ).pipe(Effect.flatten)

/** Rejection counts as a plain record. */
export const counts = (
  channel = "tg"
): Effect.Effect<Record<string, number>, Errors.JournalError, ChannelStore.ChannelStore> =>
  Effect.flatMap(ChannelStore.ChannelStore, (store) =>
    Effect.map(store.rejections(channel), (rs) => Object.fromEntries(rs.map((r) => [r.reason, r.count])))
  )

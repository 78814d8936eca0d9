/**
 * The channel layer as one piece, for the daemon (or any host) to mount over a `Gateway`:
 *
 * ```ts
 * const channels = Channels.layer({
 *   channels: config.channels, // decoded `[[channels]]` entries (ChannelConfig.Entries)
 *   store: { filename: join(dataDir, "channels.sqlite") }
 * }).pipe(Layer.provide(kernel))
 * ```
 *
 * It opens the channel store, connects every enabled channel's connector (Telegram: `getMe`; a
 * webhook: its listener), starts the outbox workers and the router, then starts receiving. Closing
 * the layer stops receiving first, then the workers, then closes the store. Inbound sightings older
 * than `inboundRetention` (default 7 days) are forgotten hourly.
 *
 * @since 0.1.0
 */
import { type Errors, type Gateway, Pairing as PairingPort } from "@palyra/core"
import { Clock, Context, Duration, Effect, Layer, Schedule, type Scope } from "effect"
import * as ChannelConfig from "./ChannelConfig.js"
import * as ChannelRouter from "./ChannelRouter.js"
import { ChannelStore } from "./ChannelStore.js"
import type { Connector, ConnectorError } from "./Connector.js"
import * as SignedWebhook from "./connectors/SignedWebhook.js"
import * as Telegram from "./connectors/Telegram.js"
import * as Outbox from "./Outbox.js"
import * as Pairing from "./Pairing.js"
import type { ChannelSettings } from "./Settings.js"
import * as SqliteChannelStore from "./SqliteChannelStore.js"

/** The connected connectors, by channel name (e.g. to log where webhooks listen). @since 0.1.0 @category Tags */
export class Connectors extends Context.Tag("@palyra/channels/Connectors")<
  Connectors,
  ReadonlyMap<string, Connector>
>() {}

/**
 * What the channel layer provides, core's `Pairing` port included (what the CLI and the HTTP API's
 * `/v1/pairing` routes use).
 *
 * @since 0.1.0
 * @category Models
 */
export type Services =
  | ChannelRouter.ChannelRouter
  | Pairing.Pairing
  | PairingPort.Pairing
  | Outbox.Outbox
  | Connectors
  | ChannelStore

/** @since 0.1.0 @category Models */
export interface AssemblyOptions {
  /** The router's settings, one per channel. */
  readonly settings: ReadonlyArray<ChannelSettings>
  /** Connected connectors (at most one per channel); each one's `self` names join its mention patterns. */
  readonly connectors: ReadonlyArray<Connector>
  readonly outbox?: Omit<Outbox.Options, "connectors"> | undefined
  /** How long inbound sightings are kept for dedupe (default 7 days). */
  readonly inboundRetention?: Duration.DurationInput | undefined
}

/**
 * Wire router, pairing and outbox over the given connectors and start receiving; everything lives
 * in the scope.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const assemble = (
  options: AssemblyOptions
): Effect.Effect<
  Context.Context<ChannelRouter.ChannelRouter | Pairing.Pairing | PairingPort.Pairing | Outbox.Outbox | Connectors>,
  ConnectorError,
  Gateway.Gateway | ChannelStore | Scope.Scope
> =>
  Effect.gen(function* () {
    const byChannel = new Map(options.connectors.map((c) => [c.channel, c]))
    const settings = options.settings.map((s): ChannelSettings => {
      const c = byChannel.get(s.name)
      return c === undefined
        ? s
        : {
            ...s,
            mentionPatterns: [...(s.mentionPatterns ?? []), ...c.self.mentionPatterns],
            mentionIds: [...(s.mentionIds ?? []), ...c.self.mentionIds],
            commandPrefix: s.commandPrefix ?? c.commandPrefix
          }
    })
    const outbox = yield* Outbox.make({ ...options.outbox, connectors: options.connectors })
    const router = yield* ChannelRouter.make({ channels: settings }).pipe(Effect.provideService(Outbox.Outbox, outbox))
    const pairing = yield* Pairing.make(settings)
    const admin = yield* Pairing.makeAdmin(pairing)
    const store = yield* ChannelStore

    const retention = Duration.toMillis(Duration.decode(options.inboundRetention ?? "7 days"))
    yield* Effect.forkScoped(
      Effect.flatMap(Clock.currentTimeMillis, (now) => store.pruneInbound(now - retention)).pipe(
        Effect.catchAll((e) => Effect.logWarning("could not prune channel inbound sightings", e)),
        Effect.repeat(Schedule.spaced("1 hour"))
      )
    )
    for (const connector of options.connectors) {
      const s = router.settings(connector.channel)
      if (s._tag === "Some" && s.value.enabled) yield* connector.start(router.sink(connector.channel))
    }
    return Context.make(ChannelRouter.ChannelRouter, router)
      .pipe(Context.add(Pairing.Pairing, pairing))
      .pipe(Context.add(PairingPort.Pairing, admin))
      .pipe(Context.add(Outbox.Outbox, outbox))
      .pipe(Context.add(Connectors, byChannel))
  })

/** @since 0.1.0 @category Models */
export interface Options {
  /** Decoded `[[channels]]` entries (`ChannelConfig.Entries`). */
  readonly channels: ReadonlyArray<ChannelConfig.Entry>
  /** The channel store: a SQLite file of its own, or any store layer. */
  readonly store: { readonly filename: string } | Layer.Layer<ChannelStore, Errors.JournalError>
  readonly outbox?: Omit<Outbox.Options, "connectors"> | undefined
  readonly inboundRetention?: Duration.DurationInput | undefined
}

/**
 * Connect the connector an entry describes. Slack's client (`@slack/web-api`) is loaded only when a
 * Slack channel is configured.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const connect = (entry: ChannelConfig.Entry): Effect.Effect<Connector, ConnectorError, Scope.Scope> =>
  entry.kind === "telegram"
    ? Telegram.make(ChannelConfig.telegramOptions(entry))
    : entry.kind === "slack"
      ? Effect.flatMap(
          Effect.promise(() => import("./connectors/Slack.js")),
          (Slack) => Slack.make(ChannelConfig.slackOptions(entry))
        )
      : SignedWebhook.make(ChannelConfig.webhookOptions(entry))

/**
 * The channel layer from configuration.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (
  options: Options
): Layer.Layer<Services, Errors.JournalError | ConnectorError, Gateway.Gateway> => {
  const store: Layer.Layer<ChannelStore, Errors.JournalError> =
    "filename" in options.store ? SqliteChannelStore.layer(options.store) : options.store
  const channels = Layer.scopedContext(
    Effect.gen(function* () {
      const connectors: Array<Connector> = []
      for (const entry of options.channels) if (entry.enabled) connectors.push(yield* connect(entry))
      return yield* assemble({
        settings: options.channels.map(ChannelConfig.toSettings),
        connectors,
        outbox: options.outbox,
        inboundRetention: options.inboundRetention
      })
    })
  )
  return channels.pipe(Layer.provideMerge(store))
}

/**
 * Run the channel layer until interrupted (for a host that launches it on its own).
 *
 * @since 0.1.0
 * @category Running
 */
export const serve = (options: Options): Effect.Effect<never, Errors.JournalError | ConnectorError, Gateway.Gateway> =>
  Layer.launch(layer(options))

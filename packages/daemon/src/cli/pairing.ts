/**
 * `palyra pairing …`: an operator pairs chat-platform identities with principals, through palyrad's
 * `/v1/pairing` routes (operator token needed: the data dir's admin token by default).
 *
 * ```text
 * palyra pairing mint CHANNEL --principal NAME [--ttl 10m] [--binding-ttl 30d] [--json]
 * palyra pairing list [--channel NAME] [--json]
 * palyra pairing revoke CODE-OR-ID [--json]
 * palyra pairing identities [--channel NAME] [--principal NAME] [--json]
 * palyra pairing unpair ID [--json]
 * ```
 *
 * The code is printed once, at mint: palyrad keeps only its digest.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { PairingGroup } from "@palyra/transport-http"
import { Effect, Option, Schema } from "effect"
import { connect, connectionOptions } from "../internal/cli/client.js"
import { json, out, Usage } from "../internal/cli/io.js"

const jsonFlag = Options.boolean("json").pipe(
  Options.withDescription("print one JSON document (the API's encoding) on stdout, and nothing else")
)
const channelOption = Options.text("channel").pipe(
  Options.withPseudoName("NAME"),
  Options.withDescription("only this channel"),
  Options.optional
)

/** `90`, `90s`, `10m`, `12h`, `30d` as seconds. */
const seconds = (flag: string, value: Option.Option<string>) =>
  Option.match(value, {
    onNone: () => Effect.succeed(undefined),
    onSome: (v) => {
      const m = /^(\d{1,9})([smhd]?)$/.exec(v.trim())
      const n = m === null ? Number.NaN : Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86_400 }[m[2]!]!
      return Number.isSafeInteger(n) && n > 0
        ? Effect.succeed(n)
        : Effect.fail(new Usage({ message: `--${flag} must be a duration like 90s, 10m, 12h or 30d` }))
    }
  })

const when = (ms: number | null) => (ms === null ? "never" : new Date(ms).toISOString())
const encodeCode = Schema.encodeSync(PairingGroup.PairingCode)
const encodeMinted = Schema.encodeSync(PairingGroup.MintedPairingCode)
const encodeIdentity = Schema.encodeSync(PairingGroup.PairedIdentity)
const codeLine = (c: PairingGroup.PairingCode) =>
  `${c.id}  ${c.status.padEnd(7)}  ${c.channel}  → ${c.principal}  expires ${when(c.expiresAt)}  by ${c.createdBy}\n`
const identityLine = (i: PairingGroup.PairedIdentity) =>
  `${i.id}  ${i.active ? "active " : "revoked"}  ${i.channel}/${i.senderId}  → ${i.principal}  since ${when(i.createdAt)}${
    i.expiresAt === null ? "" : `  until ${when(i.expiresAt)}`
  }\n`

const mint = Command.make(
  "mint",
  {
    ...connectionOptions,
    json: jsonFlag,
    channel: Args.text({ name: "channel" }),
    principal: Options.text("principal").pipe(
      Options.withPseudoName("NAME"),
      Options.withDescription("the principal the code pairs the sender with")
    ),
    ttl: Options.text("ttl").pipe(
      Options.withDescription("how long the code stays valid (default: the channel's, 10m)"),
      Options.optional
    ),
    bindingTtl: Options.text("binding-ttl").pipe(
      Options.withDescription("how long the pairing lasts (default: until revoked)"),
      Options.optional
    )
  },
  (o) =>
    Effect.gen(function* () {
      const ttlSeconds = yield* seconds("ttl", o.ttl)
      const bindingTtlSeconds = yield* seconds("binding-ttl", o.bindingTtl)
      const d = yield* connect(o)
      const minted = yield* d.call((api) =>
        api.pairing.mint({
          payload: {
            channel: o.channel,
            principal: o.principal,
            ...(ttlSeconds === undefined ? {} : { ttlSeconds }),
            ...(bindingTtlSeconds === undefined ? {} : { bindingTtlSeconds })
          }
        })
      )
      if (o.json) return yield* json(encodeMinted(minted))
      yield* out(
        `${minted.code}\n\nSend this code to the bot in a direct message on ${minted.channel} to pair as ${minted.principal}.\n` +
          `It works once, until ${when(minted.expiresAt)}, and is not shown again (id ${minted.id}).\n`
      )
    })
).pipe(Command.withDescription("mint a single-use pairing code (shown once)"))

const list = Command.make("list", { ...connectionOptions, json: jsonFlag, channel: channelOption }, (o) =>
  Effect.gen(function* () {
    const d = yield* connect(o)
    const codes = yield* d.call((api) =>
      api.pairing.list({ urlParams: Option.isSome(o.channel) ? { channel: o.channel.value } : {} })
    )
    if (o.json) return yield* json(codes.map((c) => encodeCode(c)))
    if (codes.length === 0) yield* out("no pairing codes\n")
    for (const c of codes) yield* out(codeLine(c))
  })
).pipe(Command.withDescription("pairing codes by id and status (never the codes themselves)"))

const revoke = Command.make(
  "revoke",
  { ...connectionOptions, json: jsonFlag, code: Args.text({ name: "code-or-id" }) },
  (o) =>
    Effect.gen(function* () {
      const d = yield* connect(o)
      const c = yield* d.call((api) => api.pairing.revoke({ path: { code: o.code } }))
      if (o.json) return yield* json(encodeCode(c))
      yield* out(`${c.id}: ${c.status}\n`)
    })
).pipe(Command.withDescription("revoke an unused pairing code, by the code or its id"))

const identities = Command.make(
  "identities",
  {
    ...connectionOptions,
    json: jsonFlag,
    channel: channelOption,
    principal: Options.text("principal").pipe(
      Options.withPseudoName("NAME"),
      Options.withDescription("only this principal"),
      Options.optional
    )
  },
  (o) =>
    Effect.gen(function* () {
      const d = yield* connect(o)
      const all = yield* d.call((api) =>
        api.pairing.identities({
          urlParams: {
            ...(Option.isSome(o.channel) ? { channel: o.channel.value } : {}),
            ...(Option.isSome(o.principal) ? { principal: o.principal.value } : {})
          }
        })
      )
      if (o.json) return yield* json(all.map((i) => encodeIdentity(i)))
      if (all.length === 0) yield* out("no paired identities\n")
      for (const i of all) yield* out(identityLine(i))
    })
).pipe(Command.withDescription("paired platform identities"))

const unpair = Command.make("unpair", { ...connectionOptions, json: jsonFlag, id: Args.text({ name: "id" }) }, (o) =>
  Effect.gen(function* () {
    const d = yield* connect(o)
    const i = yield* d.call((api) => api.pairing.unpair({ path: { id: o.id } }))
    if (o.json) return yield* json(encodeIdentity(i))
    yield* out(`${i.channel}/${i.senderId}: unpaired from ${i.principal}\n`)
  })
).pipe(Command.withDescription("unpair an identity: its next message is treated as a stranger's"))

/**
 * `palyra pairing`.
 *
 * @since 0.1.0
 * @category Commands
 */
export const command = Command.make("pairing").pipe(
  Command.withDescription("pair chat identities with principals (operators)"),
  Command.withSubcommands([mint, list, revoke, identities, unpair])
)

/**
 * The `ChannelRouter`: where a chat message becomes a Gateway call, or a recorded rejection.
 *
 * For each message, in order: the channel must be enabled (`channel_disabled`); a platform retry is
 * dropped (`duplicate`, by (channel, platform message id), durable); then length (`too_long`),
 * content (`empty`), the platform's word for the sender (`unverified_sender`), the deny and allow
 * lists (`sender_denied`), the DM policy (`dm_denied`), mentions in groups (`not_mentioned`,
 * `broadcast_denied`), and pairing (`not_paired`, `pairing_failed`, `locked_out`, `pairing_throttled`). Every rejection
 * is counted under its stable code; nothing else of a rejected message is kept.
 *
 * An admitted message goes through the coalescer (quick successive messages from one sender become
 * one run) and the channel's bounded queue (`queue_full`) to `Gateway.sendMessage`, with
 * `Caller.user(principal, identity)` — the paired principal, or a per-identity principal under an
 * `allow` policy — so every ownership check is the Gateway's. Each sender of a shared conversation
 * gets a private session by default. The reply (the run's final `AssistantMessage`) and approval
 * prompts leave through the outbox, keyed per (session, run, part): never twice.
 *
 * Chat commands (`/status`, `/stop`, `/reset`, `/whoami`, `/approve <code>`, `/deny <code>`,
 * `/help`) act through the Gateway as the sender's principal.
 *
 * @since 0.1.0
 */
import { Caller, Errors, Gateway, Ids, type Records, type RunState, TapeEvent } from "@palyra/core"
import { Clock, Context, Effect, Either, Layer, Option, Queue, Schema, type Scope, Stream } from "effect"
import { ChannelStore, channelAttempts, type Watch } from "./ChannelStore.js"
import * as Coalescer from "./Coalescer.js"
import * as Codes from "./Codes.js"
import type { Sink } from "./Connector.js"
import * as Inbound from "./InboundMessage.js"
import * as Metrics from "./internal/metrics.js"
import * as Mentions from "./Mentions.js"
import { Outbox, type Target } from "./Outbox.js"
import type { Reason } from "./Rejection.js"
import * as SessionKey from "./SessionKey.js"
import { type ChannelSettings, type Resolved, resolve } from "./Settings.js"

/** What became of one inbound message. @since 0.1.0 @category Models */
export type Outcome =
  | { readonly _tag: "Rejected"; readonly reason: Reason }
  /** Admitted: buffered in the coalescer, or queued for a run slot. */
  | { readonly _tag: "Admitted"; readonly principal: string; readonly sessionKey: string; readonly buffered: boolean }
  | { readonly _tag: "Command"; readonly command: string }
  | { readonly _tag: "Paired"; readonly principal: string }

/** Counters for monitoring and benchmarks. @since 0.1.0 @category Models */
export interface Stats {
  /** Messages handed to `Gateway.sendMessage` and accepted by it. */
  readonly admitted: number
  /** Admissions taken from a queue and not finished yet (waiting for the Gateway or the run). */
  readonly active: number
  /** Admissions waiting in the channels' queues. */
  readonly queued: number
  /** Keys buffered in the coalescers. */
  readonly buffered: number
}

/** @since 0.1.0 @category Models */
export interface Service {
  /** Judge and route one decoded message. */
  readonly handle: (message: Inbound.InboundMessage) => Effect.Effect<Outcome, Errors.JournalError>
  /** Decode a connector's candidate for `channel`, then `handle` it (`malformed` is counted). */
  readonly receive: (channel: string, candidate: unknown) => Effect.Effect<Outcome, Errors.JournalError>
  /** Count a request refused at the edge (e.g. a bad signature). */
  readonly refuse: (channel: string, reason: Reason) => Effect.Effect<void, Errors.JournalError>
  /** The connector-facing side of `receive` and `refuse` for one channel. */
  readonly sink: (channel: string) => Sink
  /** Emit everything the coalescers hold now. */
  readonly flush: Effect.Effect<void>
  /** Counters of one channel, or of all of them. */
  readonly stats: (channel?: string) => Effect.Effect<Stats>
  /** The channel's settings, with defaults applied. */
  readonly settings: (channel: string) => Option.Option<Resolved>
}

/** @since 0.1.0 @category Tags */
export class ChannelRouter extends Context.Tag("@palyra/channels/ChannelRouter")<ChannelRouter, Service>() {}

/** @since 0.1.0 @category Models */
export interface Options {
  readonly channels: ReadonlyArray<ChannelSettings>
}

/** The chat commands. @since 0.1.0 @category Constants */
export const COMMANDS = ["status", "stop", "reset", "whoami", "approve", "deny", "help"] as const
type Command = (typeof COMMANDS)[number]

interface ParsedCommand {
  readonly name: string
  readonly target: string | undefined
  readonly arg: string
}

/** `/name[@bot] [arg]`, or none. @since 0.1.0 @category Parsing */
export const parseCommand = (text: string): ParsedCommand | undefined => {
  const m = /^\/([A-Za-z][A-Za-z0-9_]{0,31})(?:@([A-Za-z0-9_]{1,64}))?(?:\s+([\s\S]*))?$/.exec(text.trim())
  return m === null ? undefined : { name: m[1]!.toLowerCase(), target: m[2], arg: (m[3] ?? "").trim() }
}

interface Admission {
  readonly settings: Resolved
  readonly counters: Lane["counters"]
  readonly identity: SessionKey.Identity
  readonly principal: string
  readonly sessionKey: string
  readonly coalesceKey: string
  readonly conversation: string
  readonly thread: string | null
  readonly replyTo: string
  readonly text: string
  readonly media: boolean
}

interface Lane {
  readonly settings: Resolved
  readonly counters: { admitted: number; active: number }
  readonly queue: Queue.Queue<Admission>
  readonly coalescer: Coalescer.Coalescer<Admission>
}

const ACTIVE: ReadonlyArray<RunState.RunState> = ["Pending", "Accepted", "InProgress", "WaitingForApproval"]

const rejected = (reason: Reason): Outcome => ({ _tag: "Rejected", reason })

const describeAttachment = (a: Inbound.Attachment) =>
  `[attachment: ${a.kind}${a.name === undefined ? "" : ` "${a.name}"`}${a.mimeType === undefined ? "" : ` ${a.mimeType}`}${
    a.size === undefined ? "" : `, ${a.size} bytes`
  }]`

const senderListed = (list: ReadonlyArray<string>, sender: Inbound.Sender) =>
  list.some((entry) =>
    entry.startsWith("@")
      ? sender.handle !== undefined && entry.slice(1).toLowerCase() === sender.handle.replace(/^@/, "").toLowerCase()
      : entry === sender.id
  )

const decodeApprovalId = Schema.decodeUnknownOption(Ids.ApprovalId)
const decodeRunId = Schema.decodeUnknownOption(Ids.RunId)
const decodeSessionId = Schema.decodeUnknownOption(Ids.SessionId)

const HINT =
  "Hi! This assistant only answers accounts that are paired with it. Ask its operator for a pairing code and send the code here."

/**
 * Build the router; its queues' workers live in the scope. Runs whose reply was still owed when the
 * previous process stopped are followed again.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (
  options: Options
): Effect.Effect<Service, never, Gateway.Gateway | ChannelStore | Outbox | Scope.Scope> =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const store = yield* ChannelStore
    const outbox = yield* Outbox
    const all = new Map(options.channels.map((c) => [c.name, resolve(c)] as const))
    const lanes = new Map<string, Lane>()

    const record = (channel: string, reason: Reason) =>
      Effect.flatMap(Clock.currentTimeMillis, (at) => store.recordRejection(channel, reason, at)).pipe(
        Effect.zipLeft(Metrics.recordRejection(channel, reason))
      )
    const reject = (channel: string, reason: Reason) => Effect.as(record(channel, reason), rejected(reason))
    const logged =
      (what: string) =>
      <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A | void, never, R> =>
        Effect.catchAllCause(self, (cause) => Effect.logError(what, cause))

    /** Answer the message that arrived, once (keyed by its platform id and `part`). */
    const answer = (message: Inbound.InboundMessage, part: string, text: string) =>
      outbox.send(targetOf(message), ["inbound", message.channel, message.platformMessageId], part, text)
    const targetOf = (message: Inbound.InboundMessage): Target => ({
      channel: message.channel,
      account: message.account,
      conversation: message.conversation,
      thread: message.thread ?? null,
      replyTo: message.platformMessageId
    })

    // ---- following a run to its end ------------------------------------------------------------
    const promptApproval = (
      watch: Watch,
      target: Target,
      e: TapeEvent.TapeEventOf<"ApprovalRequested">,
      settings: Resolved
    ) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        let code: string | undefined
        for (let i = 0; code === undefined && i < 5; i++) {
          const put = yield* Effect.either(
            store.putApprovalCode({
              code: Codes.approvalCode(),
              approvalId: e.approvalId,
              channel: watch.channel,
              conversation: watch.conversation,
              principal: watch.principal,
              createdAt: now,
              expiresAt: e.expiresAt
            })
          )
          if (Either.isRight(put)) code = put.right.code
          else if (put.left._tag !== "Conflict") return yield* put.left
        }
        if (code === undefined) return yield* Effect.logError("could not draw a free approval code")
        const summary = e.summary.length > 300 ? `${e.summary.slice(0, 300)}…` : e.summary
        const minutes = Math.max(1, Math.round((e.expiresAt - now) / 60_000))
        yield* outbox.send(
          target,
          [watch.sessionId, watch.runId],
          `approval:${e.approvalId}`,
          `Approval needed: ${e.tool} (${e.risk}) — ${summary}\nReply ${settings.commandPrefix}approve ${code} or ${settings.commandPrefix}deny ${code} (expires in about ${minutes} min).`
        )
      })

    const follow = (watch: Watch, settings: Resolved, caller: Caller.Caller) =>
      Effect.gen(function* () {
        const runId = Option.getOrUndefined(decodeRunId(watch.runId))
        if (runId === undefined) return yield* store.endWatch(watch.runId)
        const run = yield* gateway.getRun(caller, runId)
        const target: Target = {
          channel: watch.channel,
          account: watch.account,
          conversation: watch.conversation,
          thread: watch.thread,
          replyTo: watch.replyTo,
          sessionId: run.sessionId,
          runId: run.id
        }
        let reply = ""
        let end: RunState.RunState | undefined
        let errorCode: string | undefined
        yield* gateway.subscribe(caller, run.sessionId, run.startSeq - 1).pipe(
          Stream.filter((e) => e.runId === run.id),
          Stream.takeUntil(TapeEvent.isRunEnd),
          Stream.runForEach((e) => {
            if (e._tag === "ApprovalRequested") return promptApproval(watch, target, e, settings)
            if (e._tag === "AssistantMessage") reply = e.text
            else if (e._tag === "RunError") errorCode = e.code
            else if (e._tag === "RunStateChanged") end = e.to
            return Effect.void
          })
        )
        if (end === "Done" && reply.trim().length > 0) {
          yield* outbox.send(target, [run.sessionId, run.id], "reply", `${settings.responsePrefix}${reply}`)
        } else if (end === "Failed") {
          yield* outbox.send(
            target,
            [run.sessionId, run.id],
            "error",
            `${settings.responsePrefix}Sorry, that did not work (${errorCode ?? "failed"}).`
          )
        }
        yield* store.endWatch(watch.runId)
      })

    const callerOf = (principal: string, identity: SessionKey.Identity) =>
      Caller.user(principal, { channel: identity.channel, account: identity.account, senderId: identity.senderId })

    /**
     * Hand an admission to the Gateway and record the watch: once the Gateway has the run, its reply
     * is owed and the watch says so (a restart follows it), so nothing after `sendMessage` may be
     * interrupted. `sendMessage` itself runs interruptibly — explicitly, also inside a finalizer —
     * because the run fiber the Gateway forks inherits its interruptibility.
     */
    const admit = (item: Admission, caller: Caller.Caller) =>
      Effect.uninterruptible(
        Effect.gen(function* () {
          const sent = yield* Effect.either(
            Effect.interruptible(
              // (channel, account, conversation) picks a new session's agent through the bindings.
              gateway.sendMessage(caller, {
                key: item.sessionKey,
                channel: item.settings.name,
                account: item.identity.account,
                conversation: item.conversation,
                text: item.text
              })
            )
          )
          if (Either.isLeft(sent)) {
            const wire = Errors.toWire(sent.left)
            yield* record(item.settings.name, "gateway_refused")
            yield* outbox.send(
              {
                channel: item.settings.name,
                account: item.identity.account,
                conversation: item.conversation,
                thread: item.thread,
                replyTo: item.replyTo
              },
              ["inbound", item.settings.name, item.replyTo],
              "refused",
              `${item.settings.responsePrefix}Sorry, I could not take that message (${wire.code}: ${wire.message}).`
            )
            return Option.none<Watch>()
          }
          item.counters.admitted++
          const watch: Watch = {
            ...item.identity,
            runId: sent.right.run.id,
            sessionId: sent.right.session.id,
            principal: item.principal,
            conversation: item.conversation,
            thread: item.thread,
            replyTo: item.replyTo,
            createdAt: yield* Clock.currentTimeMillis
          }
          yield* store.putWatch(watch)
          return Option.some(watch)
        })
      )

    const runAdmission = (item: Admission) =>
      Effect.scoped(
        Effect.gen(function* () {
          const caller = callerOf(item.principal, item.identity)
          // The conversation is an approval channel for this session (only) while the run lives:
          // registered before the run is admitted, so an approval it asks for at once still finds
          // someone to ask. (If the session cannot be resolved, `admit` reports why.)
          const session = yield* Effect.option(
            gateway.resolveSession(caller, {
              key: item.sessionKey,
              channel: item.settings.name,
              account: item.identity.account,
              conversation: item.conversation
            })
          )
          if (Option.isSome(session)) yield* gateway.registerApprover(caller, session.value.id)
          const watch = yield* admit(item, caller)
          if (Option.isSome(watch)) yield* follow(watch.value, item.settings, caller)
        })
      )

    // ---- lanes: coalescer → bounded queue → workers ---------------------------------------------
    for (const settings of all.values()) {
      if (!settings.enabled) continue
      const queue = yield* Queue.dropping<Admission>(settings.maxQueue)
      const counters = { admitted: 0, active: 0 }
      const coalescer = yield* Coalescer.make<Admission>({
        window: settings.coalesce.windowMs,
        maxWait: settings.coalesce.maxWaitMs,
        maxKeys: settings.coalesce.maxKeys,
        maxItems: settings.coalesce.maxItems,
        key: (a) => a.coalesceKey,
        bypass: (a) => a.media,
        merge: (items) => {
          const last = items[items.length - 1]!
          return { ...last, text: items.map((a) => a.text).join("\n") }
        },
        emit: (item) =>
          Effect.gen(function* () {
            if (yield* Queue.offer(queue, item)) return
            yield* record(settings.name, "queue_full")
            yield* outbox.send(
              {
                channel: settings.name,
                account: item.identity.account,
                conversation: item.conversation,
                thread: item.thread,
                replyTo: item.replyTo
              },
              ["inbound", settings.name, item.replyTo],
              "busy",
              `${settings.responsePrefix}I am busy right now; please send that again in a moment.`
            )
          }).pipe(logged("could not queue a channel message"))
      })
      lanes.set(settings.name, { settings, counters, queue, coalescer })
      for (let i = 0; i < settings.maxConcurrent; i++) {
        yield* Effect.forkScoped(
          Effect.forever(
            Effect.flatMap(Queue.take(queue), (item) =>
              Effect.sync(() => void counters.active++).pipe(
                Effect.zipRight(runAdmission(item)),
                logged("a channel run failed"),
                Effect.ensuring(Effect.sync(() => void counters.active--))
              )
            )
          )
        )
      }
      // Runs whose reply the previous process still owed.
      const owed = yield* store.listWatches(settings.name).pipe(Effect.orElseSucceed(() => []))
      for (const watch of owed) {
        yield* Effect.forkScoped(
          Effect.scoped(
            Effect.gen(function* () {
              const caller = callerOf(watch.principal, watch)
              const sessionId = decodeSessionId(watch.sessionId)
              if (Option.isSome(sessionId)) yield* gateway.registerApprover(caller, sessionId.value)
              yield* follow(watch, settings, caller)
            })
          ).pipe(logged("could not follow a channel run after a restart"))
        )
      }
    }

    // At shutdown (this finalizer runs before the workers are interrupted), messages still buffered
    // or queued were already claimed for dedupe: hand them to the Gateway now, so the next process
    // follows their runs instead of losing them.
    yield* Effect.addFinalizer(() =>
      Effect.forEach(
        lanes.values(),
        (lane) =>
          Effect.gen(function* () {
            const waiting = [...(yield* lane.coalescer.drain), ...(yield* Queue.takeAll(lane.queue))]
            for (const item of waiting) yield* admit(item, callerOf(item.principal, item.identity))
          }),
        { discard: true }
      ).pipe(logged("could not hand over waiting channel messages at shutdown"))
    )

    // ---- pairing (an unpaired sender in a DM) -----------------------------------------------------
    const pairingCandidate = (text: string): string | undefined => {
      const command = parseCommand(text)
      const typed =
        command === undefined ? text : command.name === "pair" || command.name === "start" ? command.arg : ""
      return Codes.normalize(typed, 8)
    }

    const pair = (settings: Resolved, message: Inbound.InboundMessage, identity: SessionKey.Identity) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const attempts = yield* store.getAttempts(identity)
        if (Option.isSome(attempts) && attempts.value.lockedUntil !== null && attempts.value.lockedUntil > now) {
          return yield* reject(settings.name, "locked_out")
        }
        const code = pairingCandidate(message.text)
        if (code === undefined) {
          if (yield* store.claimHint(identity, now, settings.pairing.hintIntervalMs))
            yield* answer(message, "hint", HINT)
          return yield* reject(settings.name, "not_paired")
        }
        // The channel-wide cap: many senders guessing together are refused like one.
        const channelKey = channelAttempts(settings.name)
        const channelState = yield* store.getAttempts(channelKey)
        if (
          Option.isSome(channelState) &&
          channelState.value.lockedUntil !== null &&
          channelState.value.lockedUntil > now
        ) {
          return yield* reject(settings.name, "pairing_throttled")
        }
        const bound = yield* store.redeemPairingCode({ digest: Codes.digest(code), identity, at: now })
        if (Option.isSome(bound)) {
          yield* Metrics.recordPairing(settings.name)
          yield* Effect.logInfo("identity paired").pipe(
            Effect.annotateLogs({ channel: settings.name, principal: bound.value.principal })
          )
          yield* answer(message, "paired", `Paired. You are now talking to this assistant as ${bound.value.principal}.`)
          return { _tag: "Paired", principal: bound.value.principal } as const
        }
        const after = yield* store.recordFailure(identity, now, {
          maxFailures: settings.pairing.maxFailures,
          windowMs: settings.pairing.failureWindowMs,
          lockoutMs: settings.pairing.lockoutMs
        })
        const channelAfter = yield* store.recordFailure(channelKey, now, {
          maxFailures: settings.pairing.channelMaxFailures,
          windowMs: settings.pairing.channelFailureWindowMs,
          lockoutMs: settings.pairing.channelLockoutMs
        })
        if (channelAfter.lockedUntil !== null && channelAfter.lockedUntil === now + settings.pairing.channelLockoutMs) {
          yield* Effect.logWarning("too many wrong pairing codes on the channel: pairing paused").pipe(
            Effect.annotateLogs({ channel: settings.name, until: channelAfter.lockedUntil })
          )
        }
        const locked = after.lockedUntil !== null && after.lockedUntil > now
        yield* answer(
          message,
          "pairing",
          locked
            ? `That code is not valid. Too many wrong codes: try again in ${Math.ceil(settings.pairing.lockoutMs / 60_000)} minutes.`
            : `That code is not valid (${settings.pairing.maxFailures - after.failures} attempts left).`
        )
        return yield* reject(settings.name, "pairing_failed")
      })

    // ---- commands --------------------------------------------------------------------------------
    const runCommand = (
      settings: Resolved,
      message: Inbound.InboundMessage,
      command: Command,
      arg: string,
      principal: string,
      identity: SessionKey.Identity,
      sessionKey: string,
      paired: boolean
    ) =>
      Effect.gen(function* () {
        const caller = callerOf(principal, identity)
        const session = gateway.resolveSession(caller, { key: sessionKey, channel: settings.name })
        const activeRuns = (s: Records.Session) => gateway.listRuns(caller, { sessionId: s.id, states: ACTIVE })
        const act: Effect.Effect<string, Gateway.GatewayError | Errors.JournalError> = Effect.gen(function* () {
          switch (command) {
            case "help":
              return "Commands: /status, /stop (cancel what is running), /reset (start afresh), /whoami, /approve <code>, /deny <code>.".replaceAll(
                "/",
                settings.commandPrefix
              )
            case "whoami":
              return `You are ${principal}${paired ? " (paired)" : ""}, sender ${identity.senderId} on ${identity.channel}.`
            case "status": {
              const s = yield* session
              const runs = yield* activeRuns(s)
              const pending = yield* gateway.listApprovals(caller, { sessionId: s.id, status: "pending" })
              return runs.length === 0
                ? "Nothing is running."
                : `${runs.length} run(s) going: ${runs.map((r) => r.state).join(", ")}${
                    pending.length > 0 ? `; ${pending.length} waiting for your approval` : ""
                  }.`
            }
            case "stop": {
              const runs = yield* activeRuns(yield* session)
              for (const r of runs) yield* gateway.cancelRun(caller, r.id)
              return runs.length === 0 ? "Nothing is running." : `Stopped ${runs.length} run(s).`
            }
            case "reset": {
              yield* gateway.resetSession(caller, (yield* session).id)
              return "Done: the next message starts a fresh conversation."
            }
            case "approve":
            case "deny": {
              const code = Codes.normalize(arg, 6)
              const found = code === undefined ? Option.none() : yield* store.getApprovalCode(code)
              const approvalId = Option.flatMap(
                Option.filter(found, (c) => c.channel === settings.name && c.conversation === message.conversation),
                (c) => decodeApprovalId(c.approvalId)
              )
              const none = `No approval is waiting with code ${arg || "(none)"} here.`
              if (Option.isNone(approvalId)) return none
              // Only an approval of the sender's own session (another sender's in a shared
              // conversation, even of the same principal, is not theirs to answer).
              const record = yield* Effect.either(gateway.getApproval(caller, approvalId.value))
              if (Either.isLeft(record)) return none
              if (record.right.sessionId !== (yield* session).id) return none
              const resolved = yield* Effect.either(
                gateway.resolveApproval(caller, { approvalId: approvalId.value, decision: command, scope: "once" })
              )
              if (Either.isRight(resolved)) return command === "approve" ? "Approved." : "Denied."
              if (resolved.left._tag === "NotFound") return none
              if (resolved.left._tag === "Conflict") return "That approval was already answered or has expired."
              return yield* resolved.left
            }
          }
        })
        const text = yield* act.pipe(
          Effect.catchAll((e) =>
            e._tag === "JournalError"
              ? Effect.fail(e)
              : Effect.succeed(`That did not work (${Errors.toWire(e).code}: ${Errors.toWire(e).message}).`)
          )
        )
        yield* answer(message, "command", `${settings.responsePrefix}${text}`)
        return { _tag: "Command", command } as const
      })

    // ---- the admission pipeline ------------------------------------------------------------------
    const handle: Service["handle"] = Effect.fn("ChannelRouter.handle")(function* (message: Inbound.InboundMessage) {
      const lane = lanes.get(message.channel)
      if (lane === undefined) return yield* reject(message.channel, "channel_disabled")
      const s = lane.settings
      const now = yield* Clock.currentTimeMillis
      if (!(yield* store.claimInbound(s.name, message.platformMessageId, now)))
        return yield* reject(s.name, "duplicate")
      if (message.text.length > s.maxTextChars) return yield* reject(s.name, "too_long")
      if (message.text.trim().length === 0 && message.attachments.length === 0) return yield* reject(s.name, "empty")
      if (!message.sender.verified && !s.allowUnverified) return yield* reject(s.name, "unverified_sender")
      if (senderListed(s.denyFrom, message.sender)) return yield* reject(s.name, "sender_denied")
      if (s.allowFrom.length > 0 && !senderListed(s.allowFrom, message.sender)) {
        return yield* reject(s.name, "sender_denied")
      }
      if (message.isDirect && s.dmPolicy === "deny") return yield* reject(s.name, "dm_denied")

      const parsed = s.commands ? parseCommand(message.text) : undefined
      const ownHandles = s.mentionPatterns.filter((p) => p.startsWith("@")).map((p) => p.slice(1).toLowerCase())
      const forUs = parsed?.target === undefined || ownHandles.includes(parsed.target.toLowerCase())
      const command =
        parsed !== undefined && forUs && (COMMANDS as ReadonlyArray<string>).includes(parsed.name)
          ? (parsed.name as Command)
          : undefined

      const broadcast =
        Mentions.hasBroadcast(message.text) ||
        message.mentions.some((m) => Mentions.BROADCASTS.includes(m.toLowerCase()))
      if (!message.isDirect) {
        if (broadcast && s.broadcast === "deny") return yield* reject(s.name, "broadcast_denied")
        const direct =
          message.mentions.some((m) => s.mentionIds.includes(m.toLowerCase())) ||
          Mentions.matchesAny(message.text, s.mentionPatterns) ||
          command !== undefined
        const addressed = direct || (broadcast && s.broadcast === "allow")
        if (s.requireMention && !addressed) {
          return yield* reject(s.name, broadcast ? "broadcast_denied" : "not_mentioned")
        }
      }

      const identity: SessionKey.Identity = { channel: s.name, account: message.account, senderId: message.sender.id }
      const binding = yield* store.getBinding(identity, now)
      let principal: string
      if (Option.isSome(binding)) principal = binding.value.principal
      else if (message.isDirect && s.dmPolicy === "pairing") return yield* pair(s, message, identity)
      else if (message.isDirect || s.groupPolicy === "allow") principal = SessionKey.identityPrincipal(identity)
      else return yield* reject(s.name, "not_paired")

      const keyParts = {
        channel: s.name,
        account: message.account,
        conversation: message.conversation,
        thread: message.thread
      }
      const sessionKey = SessionKey.make({
        ...keyParts,
        sender: s.isolateSessionBySender ? message.sender.id : undefined
      })
      const coalesceKey = SessionKey.make({ ...keyParts, sender: message.sender.id })

      if (command !== undefined) {
        // Whatever the sender said just before goes first.
        yield* lane.coalescer.flush(coalesceKey)
        return yield* runCommand(
          s,
          message,
          command,
          parsed?.arg ?? "",
          principal,
          identity,
          sessionKey,
          Option.isSome(binding)
        )
      }

      const body = s.broadcast === "allow" ? message.text : Mentions.stripBroadcasts(message.text)
      const text = [body, ...message.attachments.map(describeAttachment)].filter((t) => t.trim().length > 0).join("\n")
      if (text.length === 0) return yield* reject(s.name, "empty")
      const result = yield* lane.coalescer.offer({
        settings: s,
        counters: lane.counters,
        identity,
        principal,
        sessionKey,
        coalesceKey,
        conversation: message.conversation,
        thread: message.thread ?? null,
        replyTo: message.platformMessageId,
        text,
        media: message.attachments.length > 0
      })
      return { _tag: "Admitted", principal, sessionKey, buffered: result === "buffered" } as const
    })

    const receive: Service["receive"] = (channel, candidate) =>
      Effect.flatMap(Effect.either(Inbound.decode(candidate)), (decoded) =>
        Either.isRight(decoded)
          ? handle(decoded.right)
          : Effect.zipRight(
              Effect.logDebug("malformed channel message", decoded.left.message),
              reject(channel, "malformed")
            )
      )

    return {
      handle,
      receive,
      refuse: record,
      sink: (channel) => ({
        receive: (candidate) =>
          receive(channel, candidate).pipe(
            Effect.map((o) => (o._tag === "Rejected" && o.reason === "malformed" ? "malformed" : "accepted")),
            Effect.catchAllCause((cause) =>
              Effect.as(Effect.logError("a channel message could not be handled", cause), "failed" as const)
            )
          ),
        refuse: (reason) => record(channel, reason).pipe(logged("could not count a refused request"))
      }),
      flush: Effect.forEach(lanes.values(), (lane) => lane.coalescer.flushAll, { discard: true }),
      stats: (channel) =>
        Effect.gen(function* () {
          const totals = { admitted: 0, active: 0, queued: 0, buffered: 0 }
          for (const lane of lanes.values()) {
            if (channel !== undefined && lane.settings.name !== channel) continue
            totals.admitted += lane.counters.admitted
            totals.active += lane.counters.active
            totals.queued += yield* Queue.size(lane.queue)
            totals.buffered += yield* lane.coalescer.size
          }
          return totals
        }),
      settings: (channel) => Option.fromNullable(all.get(channel))
    }
  })

/** @since 0.1.0 @category Layers */
export const layer = (options: Options): Layer.Layer<ChannelRouter, never, Gateway.Gateway | ChannelStore | Outbox> =>
  Layer.scoped(ChannelRouter, make(options))

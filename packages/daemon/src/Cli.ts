/**
 * `palyra`: the command-line client of a running palyrad, on `@effect/cli`, talking to the daemon
 * through a client derived from the HTTP contract (`Api`), plus `init` and `doctor` for a local
 * installation.
 *
 *   palyra status [--json]
 *   palyra chat [message…] [--session-key KEY] [--agent ID] [--attach FILE…] [--yes | --no]   stream answers; asks y/n/always for approvals
 *   palyra approvals list [--status pending] [--json] | approve ID [--scope …] [--reason …] | deny ID
 *   palyra grants list [--json] | revoke ID
 *   palyra sessions list [--json] | show ID [--json] | reset ID
 *   palyra sessions compact ID [--preview] | checkpoints ID [--json] | restore ID CHECKPOINT
 *   palyra agents list [--json]
 *   palyra journal tail SESSION [--follow] [--json] | verify [--json]
 *   palyra journal verify --anchor FILE [--db PATH] [--key PATH]   offline, no daemon (VerifyOffline)
 *   palyra init [--model …] [--key-env …] [--workspace …] [--http-port …] [--grpc-port …] [--yes] [--force]
 *   palyra doctor [--json]
 *   palyra tasks list|cancel ID · learning list|accept ID|reject ID · incidents [--open] · memory search Q|forget ID   (cli/background.ts)
 *
 * Connection (flags after the command): --url / PALYRA_URL (default http://127.0.0.1:7420); token:
 * --token / PALYRA_TOKEN, else the admin token file in the data dir (--data-dir / PALYRA_DATA_DIR /
 * the config file; default ./.palyra).
 *
 * `--json` prints one JSON document on stdout (the API's own encoding) and nothing else.
 *
 * Exit codes: 0 ok · 1 the request or check failed · 2 usage · 3 daemon unreachable · 4 no token, or
 * token refused.
 *
 * @since 0.1.0
 */
import { join } from "node:path"
import * as Args from "@effect/cli/Args"
import * as CliConfig from "@effect/cli/CliConfig"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Ids, Records, TapeEvent } from "@palyra/core"
import { Api } from "@palyra/transport-http"
import { ConfigProvider, Effect, Layer, Option, Schema, Stream } from "effect"
import * as DaemonConfig from "./Config.js"
import * as Attach from "./cli/attach.js"
import * as Background from "./cli/background.js"
import * as Pairing from "./cli/pairing.js"
import * as Doctor from "./Doctor.js"
import * as Init from "./Init.js"
import { type Connection, connect, connectionOptions, type Daemon } from "./internal/cli/client.js"
import * as Format from "./internal/cli/format.js"
import {
  askLine,
  CliEnv,
  type CliFailure,
  CliIo,
  err,
  exitCode,
  Failed,
  type Io,
  json,
  processIo as makeProcessIo,
  out,
  Usage
} from "./internal/cli/io.js"
import * as VerifyOffline from "./VerifyOffline.js"

/** Output, line input (when stdin is not a terminal) and whether stdin is a terminal. @since 0.1.0 @category Models */
export type { Io }

const jsonFlag = Options.boolean("json").pipe(
  Options.withDescription("print one JSON document (the API's encoding) on stdout, and nothing else")
)

const withDaemon = <A, R>(connection: Connection, f: (daemon: Daemon) => Effect.Effect<A, CliFailure, R>) =>
  Effect.flatMap(connect(connection), f)

// =============================================================================
// status
// =============================================================================

const status = Command.make("status", { ...connectionOptions, json: jsonFlag }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const ready = yield* d.ready
      if (!o.json) yield* out(`palyrad at ${d.url}: ${ready ? "ready" : "starting"}\n`)
      const counts = yield* d.call((api) =>
        Effect.all({
          sessions: api.sessions.list({ urlParams: { limit: 1000 } }),
          pending: api.approvals.list({ urlParams: { status: "pending" } })
        })
      )
      if (o.json)
        yield* json({
          url: d.url,
          ready,
          sessions: counts.sessions.length,
          pendingApprovals: counts.pending.length
        })
      else yield* out(`  sessions: ${counts.sessions.length}\n  pending approvals: ${counts.pending.length}\n`)
      if (!ready) return yield* new Failed({ message: "" })
    })
  )
).pipe(Command.withDescription("is the daemon up? sessions and pending approvals"))

// =============================================================================
// chat
// =============================================================================

interface ChatOptions {
  readonly sessionKey: string
  readonly agent: Option.Option<string>
  readonly yes: boolean
  readonly no: boolean
  readonly attach: ReadonlyArray<string>
}

const answerApproval = (d: Daemon, event: TapeEvent.TapeEventOf<"ApprovalRequested">, o: ChatOptions) =>
  Effect.gen(function* () {
    yield* out(`\n⚠ approval needed: ${event.summary} (risk: ${event.risk})\n`)
    const answer = o.yes
      ? "y"
      : o.no
        ? "n"
        : (yield* askLine("  approve? [y]es / [n]o / [a]lways for these exact arguments:")).trim().toLowerCase()
    const always = answer === "a" || answer === "always"
    const approve = always || answer === "y" || answer === "yes"
    const resolved = yield* d.call((api) =>
      api.approvals.resolve({
        path: { id: event.approvalId },
        payload: approve
          ? { decision: "approve", scope: always ? "always" : "once", reason: "answered in palyra chat" }
          : { decision: "deny", reason: "answered in palyra chat" }
      })
    )
    yield* out(`  ${resolved.status === "approved" ? `approved (${resolved.scope})` : resolved.status}\n`)
  })

/** One message: stream the run, answer approvals; fails (exit 1) unless the run ends Done. */
const chatOnce = (d: Daemon, text: string, o: ChatOptions) =>
  Effect.gen(function* () {
    const state = { final: "Done", streaming: false }
    const attachments = yield* Attach.readAttachments(o.attach)
    yield* d
      .streamRun({
        text,
        sessionKey: o.sessionKey,
        channel: "cli",
        ...Option.match(o.agent, { onNone: () => ({}), onSome: (agent) => ({ agent }) }),
        ...(attachments.length === 0 ? {} : { attachments })
      })
      .pipe(
        Stream.runForEach((event) =>
          Effect.gen(function* () {
            switch (event._tag) {
              case "AssistantDelta":
                if (!state.streaming) yield* out("assistant: ")
                state.streaming = true
                return yield* out(event.text)
              case "AssistantMessage":
                if (state.streaming) yield* out("\n")
                state.streaming = false
                return
              case "PolicyDecided":
                return yield* out(
                  `  [policy] ${event.tool}: ${event.decision} (${event.policyIds.join(", ") || "no policy"})\n`
                )
              case "ApprovalRequested":
                return yield* answerApproval(d, event, o)
              case "ToolResult":
                return yield* out(
                  `  [tool] ${event.tool}: ${event.status}${event.status === "ok" ? "" : ` — ${String(event.output).slice(0, 200)}`}\n`
                )
              case "RunError":
                return yield* err(`run failed: ${event.code}: ${event.message}\n`)
              case "RunStateChanged":
                if (event.to === "Done" || event.to === "Cancelled" || event.to === "Failed") state.final = event.to
                return
            }
          })
        )
      )
    if (state.final !== "Done") return yield* new Failed({ message: "" })
  })

const chat = Command.make(
  "chat",
  {
    ...connectionOptions,
    message: Args.text({ name: "message" }).pipe(Args.repeated),
    sessionKey: Options.text("session-key").pipe(
      Options.withAlias("session"),
      Options.withDescription("the session to talk in (per caller; default: cli)"),
      Options.withDefault("cli")
    ),
    agent: Options.text("agent").pipe(
      Options.withDescription("the agent that answers (a new session is bound to it; see `palyra agents list`)"),
      Options.optional
    ),
    yes: Options.boolean("yes").pipe(Options.withDescription("approve every approval request (once)")),
    no: Options.boolean("no").pipe(Options.withDescription("deny every approval request")),
    attach: Attach.attachOption
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const message = o.message.join(" ").trim()
        if (message.length > 0) return yield* chatOnce(d, message, o)
        const io = yield* CliIo
        if (!io.interactive) return yield* new Usage({ message: "chat needs a message when stdin is not a terminal" })
        yield* out(`palyra chat — session "${o.sessionKey}". Empty line or Ctrl-D to quit.\n`)
        let sent = 0
        while (true) {
          const line = (yield* askLine("you")).trim()
          if (line.length === 0) return
          // A failed run or request is reported and the conversation goes on; losing the daemon
          // or the token ends it.
          // The files go with the first message only.
          yield* chatOnce(d, line, { ...o, attach: sent++ === 0 ? o.attach : [] }).pipe(
            Effect.catchTag("Failed", (e) => (e.message === "" ? Effect.void : err(`${e.message}\n`)))
          )
        }
      })
    )
).pipe(Command.withDescription("chat with the agent; without a message, an interactive prompt"))

// =============================================================================
// approvals, grants
// =============================================================================

const approvalId = Args.text({ name: "approval-id" }).pipe(Args.withSchema(Ids.ApprovalId))
const reason = Options.text("reason").pipe(Options.withDescription("why (recorded)"), Options.optional)
const encodeApproval = Schema.encodeSync(Api.ApprovalRecord)

const approvalsList = Command.make(
  "list",
  {
    ...connectionOptions,
    json: jsonFlag,
    status: Options.choice("status", Records.ApprovalStatus.literals).pipe(Options.withDefault("pending"))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const list = yield* d.call((api) => api.approvals.list({ urlParams: { status: o.status } }))
        if (o.json) return yield* json(list.map((a) => encodeApproval(a)))
        if (list.length === 0) yield* out(`no ${o.status} approvals\n`)
        for (const a of list) yield* out(Format.approval(a))
      })
    )
).pipe(Command.withDescription("approvals (pending by default)"))

const approve = Command.make(
  "approve",
  {
    ...connectionOptions,
    json: jsonFlag,
    id: approvalId,
    scope: Options.choice("scope", TapeEvent.ApprovalScope.literals).pipe(Options.optional),
    reason,
    expiresIn: Options.integer("expires-in").pipe(
      Options.withDescription("a session/always grant stops applying after this many seconds"),
      Options.optional
    ),
    maxUses: Options.integer("max-uses").pipe(
      Options.withDescription("a session/always grant applies to at most this many calls"),
      Options.optional
    )
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const record = yield* d.call((api) =>
          api.approvals.resolve({
            path: { id: o.id },
            payload: {
              decision: "approve",
              ...Option.match(o.scope, { onNone: () => ({}), onSome: (scope) => ({ scope }) }),
              ...Option.match(o.reason, { onNone: () => ({}), onSome: (reason) => ({ reason }) }),
              ...Option.match(o.expiresIn, { onNone: () => ({}), onSome: (s) => ({ expiresInSeconds: s }) }),
              ...Option.match(o.maxUses, { onNone: () => ({}), onSome: (maxUses) => ({ maxUses }) })
            }
          })
        )
        if (o.json) return yield* json(encodeApproval(record))
        yield* out(`${record.id}: ${record.status}${record.status === "approved" ? ` (${record.scope})` : ""}\n`)
      })
    )
).pipe(Command.withDescription("approve a pending approval"))

const deny = Command.make("deny", { ...connectionOptions, json: jsonFlag, id: approvalId, reason }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const record = yield* d.call((api) =>
        api.approvals.resolve({
          path: { id: o.id },
          payload: {
            decision: "deny",
            ...Option.match(o.reason, { onNone: () => ({}), onSome: (reason) => ({ reason }) })
          }
        })
      )
      if (o.json) return yield* json(encodeApproval(record))
      yield* out(`${record.id}: ${record.status}\n`)
    })
  )
).pipe(Command.withDescription("deny a pending approval"))

const approvals = Command.make("approvals").pipe(
  Command.withDescription("list and answer approvals"),
  Command.withSubcommands([approvalsList, approve, deny])
)

const encodeGrant = Schema.encodeSync(Api.Grant)

const grantsList = Command.make("list", { ...connectionOptions, json: jsonFlag }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const list = yield* d.call((api) => api.grants.list())
      if (o.json) return yield* json(list.map((g) => encodeGrant(g)))
      if (list.length === 0) yield* out("no standing grants\n")
      for (const g of list) yield* out(Format.grant(g))
    })
  )
).pipe(Command.withDescription("standing approvals, each shown as the Cedar policy it amounts to"))

const revoke = Command.make("revoke", { ...connectionOptions, json: jsonFlag, id: approvalId }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const g = yield* d.call((api) => api.grants.revoke({ path: { id: o.id } }))
      if (o.json) return yield* json(encodeGrant(g))
      yield* out(`${g.id}: ${g.status}\n`)
    })
  )
).pipe(Command.withDescription("revoke a standing grant"))

const grants = Command.make("grants").pipe(
  Command.withDescription("standing approval grants"),
  Command.withSubcommands([grantsList, revoke])
)

// =============================================================================
// sessions
// =============================================================================

const sessionId = Args.text({ name: "session-id" }).pipe(Args.withSchema(Ids.SessionId))
const encodeSession = Schema.encodeSync(Api.Session)
const encodeTape = Schema.encodeSync(Schema.Array(TapeEvent.TapeEvent))

const sessionsList = Command.make(
  "list",
  {
    ...connectionOptions,
    json: jsonFlag,
    limit: Options.integer("limit").pipe(Options.withDefault(100)),
    archived: Options.boolean("archived").pipe(Options.withDescription("list archived sessions"))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const list = yield* d.call((api) =>
          api.sessions.list({ urlParams: { limit: o.limit, ...(o.archived ? { archived: true } : {}) } })
        )
        if (o.json) return yield* json(list.map((s) => encodeSession(s)))
        if (list.length === 0) yield* out("no sessions\n")
        for (const s of list) yield* out(Format.session(s))
      })
    )
).pipe(Command.withDescription("the caller's sessions, most recent first"))

const sessionsShow = Command.make("show", { ...connectionOptions, json: jsonFlag, id: sessionId }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const { session, tape } = yield* d.call((api) =>
        Effect.all({
          session: api.sessions.get({ path: { id: o.id } }),
          tape: api.sessions.tape({ path: { id: o.id }, urlParams: { limit: 5000 } })
        })
      )
      if (o.json) return yield* json({ session: encodeSession(session), tape: encodeTape(tape) })
      yield* out(Format.sessionDetail(session, tape.length))
    })
  )
).pipe(Command.withDescription("one session and its tape (as JSON with --json)"))

const sessionsReset = Command.make("reset", { ...connectionOptions, json: jsonFlag, id: sessionId }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const s = yield* d.call((api) => api.sessions.reset({ path: { id: o.id } }))
      if (o.json) return yield* json(encodeSession(s))
      yield* out(`session ${s.id} reset (generation ${s.resetGeneration})\n`)
    })
  )
).pipe(Command.withDescription("start the session's history afresh (the tape keeps everything)"))

const encodeCompaction = Schema.encodeSync(Api.Compaction)
const encodeCheckpoint = Schema.encodeSync(Api.CheckpointInfo)
const encodeRestored = Schema.encodeSync(Api.Restored)

const sessionsCompact = Command.make(
  "compact",
  {
    ...connectionOptions,
    json: jsonFlag,
    id: sessionId,
    preview: Options.boolean("preview").pipe(Options.withDescription("compute the summary; change nothing"))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const c = yield* d.call((api) =>
          api.sessions.compact({ path: { id: o.id }, urlParams: o.preview ? { preview: true } : {} })
        )
        if (o.json) return yield* json(encodeCompaction(c))
        yield* out(Format.compaction(c))
      })
    )
).pipe(Command.withDescription("compact the session's history now (--preview: show the summary, change nothing)"))

const sessionsCheckpoints = Command.make("checkpoints", { ...connectionOptions, json: jsonFlag, id: sessionId }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const list = yield* d.call((api) => api.sessions.checkpoints({ path: { id: o.id } }))
      if (o.json) return yield* json(list.map((c) => encodeCheckpoint(c)))
      if (list.length === 0) yield* out("no checkpoints (the session was never compacted)\n")
      for (const c of list) yield* out(Format.checkpoint(c))
    })
  )
).pipe(Command.withDescription("the session's compaction checkpoints"))

const sessionsRestore = Command.make(
  "restore",
  {
    ...connectionOptions,
    json: jsonFlag,
    id: sessionId,
    checkpoint: Args.text({ name: "checkpoint-id" }).pipe(Args.withSchema(Api.RestorePayload.fields.checkpointId))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const r = yield* d.call((api) =>
          api.sessions.restore({ path: { id: o.id }, payload: { checkpointId: o.checkpoint } })
        )
        if (o.json) return yield* json(encodeRestored(r))
        yield* out(
          `session ${r.session.id}: restored checkpoint ${o.checkpoint} (history from tape_seq ${r.session.historyFromSeq} again)\n`
        )
      })
    )
).pipe(Command.withDescription("put the prompt back as it was before a checkpoint's compaction"))

const sessions = Command.make("sessions").pipe(
  Command.withDescription("sessions"),
  Command.withSubcommands([
    sessionsList,
    sessionsShow,
    sessionsReset,
    sessionsCompact,
    sessionsCheckpoints,
    sessionsRestore
  ])
)

// =============================================================================
// agents
// =============================================================================

const encodeAgent = Schema.encodeSync(Api.AgentInfo)

const agentsList = Command.make("list", { ...connectionOptions, json: jsonFlag }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const list = yield* d.call((api) => api.agents.list())
      if (o.json) return yield* json(list.map((a) => encodeAgent(a)))
      for (const a of list) yield* out(Format.agent(a))
    })
  )
).pipe(Command.withDescription("the agents sessions can be bound to"))

const agents = Command.make("agents").pipe(Command.withDescription("agents"), Command.withSubcommands([agentsList]))

// =============================================================================
// journal
// =============================================================================

const tail = Command.make(
  "tail",
  {
    ...connectionOptions,
    id: sessionId,
    json: jsonFlag.pipe(
      Options.withDescription("print the tape as one JSON array (with --follow: one JSON event per line)")
    ),
    follow: Options.boolean("follow").pipe(Options.withAlias("f"), Options.withDescription("keep following new events"))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const encodeOne = Schema.encodeSync(TapeEvent.TapeEvent)
        if (o.follow) {
          return yield* d
            .follow(o.id)
            .pipe(Stream.runForEach((e) => out(o.json ? `${JSON.stringify(encodeOne(e))}\n` : Format.event(e))))
        }
        const tape = yield* d.call((api) => api.sessions.tape({ path: { id: o.id }, urlParams: { limit: 5000 } }))
        if (o.json) return yield* json(encodeTape(tape))
        for (const e of tape) yield* out(Format.event(e))
      })
    )
).pipe(Command.withDescription("print a session's tape (--follow: then live)"))

const verifyOffline = (
  o: {
    readonly json: boolean
    readonly anchor: string
    readonly db: Option.Option<string>
    readonly key: Option.Option<string>
    readonly config: Option.Option<string>
    readonly dataDir: Option.Option<string>
  },
  env: Record<string, string | undefined>,
  cwd: string
) =>
  Effect.gen(function* () {
    const config =
      Option.isSome(o.db) && Option.isSome(o.key)
        ? undefined
        : yield* DaemonConfig.load(
            { config: Option.getOrUndefined(o.config), dataDir: Option.getOrUndefined(o.dataDir) },
            env,
            cwd
          ).pipe(Effect.mapError((e) => new Usage({ message: e.message })))
    const request: VerifyOffline.Request = {
      db: Option.getOrElse(o.db, () => join(config?.dataDir ?? cwd, "journal.db")),
      witnessFile: o.anchor,
      keyFile: Option.getOrElse(o.key, () => config?.anchorKeyFile ?? "")
    }
    const report = yield* VerifyOffline.verify(request).pipe(
      Effect.mapError((e) => new Failed({ message: `cannot verify ${request.db}: ${e.message}` }))
    )
    if (o.json) yield* json({ ...request, ...report })
    else yield* out(VerifyOffline.format(request, report))
    if (!report.ok) return yield* new Failed({ message: "" })
  })

const verify = Command.make(
  "verify",
  {
    ...connectionOptions,
    json: jsonFlag,
    anchor: Options.text("anchor").pipe(
      Options.withDescription("offline: verify the journal file and this witness file, without the daemon"),
      Options.optional
    ),
    db: Options.text("db").pipe(Options.withDescription("offline: the journal file"), Options.optional),
    key: Options.text("key").pipe(Options.withDescription("offline: the anchor key (or its .pub)"), Options.optional),
    config: Options.text("config").pipe(Options.withDescription("offline: palyrad's config file"), Options.optional)
  },
  (o) =>
    Effect.gen(function* () {
      if (Option.isSome(o.anchor)) {
        const { env, cwd } = yield* CliEnv
        return yield* verifyOffline({ ...o, anchor: o.anchor.value }, env, cwd)
      }
      const result = yield* withDaemon(o, (d) => d.call((api) => api.journal.verify()))
      if (o.json) return yield* json(result)
      if (result.ok) return yield* out(`journal verified: ${result.checked} events, hash chain intact\n`)
      yield* out(`journal BROKEN after ${result.checked} good events: ${result.reason} — ${result.detail}\n`)
      return yield* new Failed({ message: "" })
    })
).pipe(Command.withDescription("recompute the hash chain (asks the daemon; with --anchor: offline)"))

const journal = Command.make("journal").pipe(
  Command.withDescription("the tape and its integrity"),
  Command.withSubcommands([tail, verify])
)

// =============================================================================
// The command tree
// =============================================================================

/**
 * The whole command tree.
 *
 * @since 0.1.0
 * @category Commands
 */
export const command = Command.make("palyra", {}, () =>
  Effect.fail(new Usage({ message: "name a command (palyra --help lists them)" }))
).pipe(
  Command.withDescription("the command-line client of palyrad"),
  Command.withSubcommands([
    status,
    chat,
    approvals,
    grants,
    sessions,
    agents,
    journal,
    Init.command,
    Doctor.command,
    Pairing.command,
    ...[Background.tasks, Background.learning, Background.incidents, Background.memory]
  ])
)

const cli = Command.run(command, { name: "palyra", version: "0.1.0" })

/**
 * Run the CLI with these arguments (without `node` and the script); succeeds with the exit code.
 *
 * @since 0.1.0
 * @category Main
 */
export const run = (argv: ReadonlyArray<string>) =>
  cli(["node", "palyra", ...argv]).pipe(
    Effect.as(0),
    Effect.catchIf(ValidationError.isValidationError, () => Effect.succeed(2)),
    Effect.catchTag("QuitException", () => Effect.as(err("palyra: cancelled\n"), 1)),
    Effect.catchAll((failure: CliFailure) =>
      Effect.as(failure.message === "" ? Effect.void : err(`palyra: ${failure.message}\n`), exitCode(failure))
    ),
    Effect.catchAllDefect((defect) =>
      Effect.as(err(`palyra: ${defect instanceof Error ? defect.message : String(defect)}\n`), 1)
    )
  )

/**
 * Everything the CLI needs: Node's file system, path and terminal, `fetch`, the I/O and the
 * environment its flags fall back to (read through a `ConfigProvider`, so `PALYRA_URL` and
 * `PALYRA_TOKEN` come from `env`, not from `process.env`).
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (env: Record<string, string | undefined>, io: Io, cwd: string = process.cwd()) =>
  Layer.mergeAll(
    NodeContext.layer,
    FetchHttpClient.layer,
    Layer.succeed(CliIo, io),
    Layer.succeed(CliEnv, { env, cwd }),
    CliConfig.layer({ showBuiltIns: false }),
    Layer.setConfigProvider(
      ConfigProvider.fromMap(
        new Map(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined))
      )
    )
  )

/**
 * Run the CLI; resolves with the exit code.
 *
 * @since 0.1.0
 * @category Main
 */
export const main = (
  argv: ReadonlyArray<string>,
  env: Record<string, string | undefined>,
  io: Io,
  cwd: string = process.cwd()
): Promise<number> => Effect.runPromise(run(argv).pipe(Effect.provide(layer(env, io, cwd))))

/**
 * Terminal I/O for the real binary.
 *
 * @since 0.1.0
 * @category Io
 */
export const processIo: () => Io & { readonly close: () => void } = makeProcessIo

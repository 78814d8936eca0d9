/**
 * `palyra tasks`, `palyra learning`, `palyra incidents` and `palyra memory`: the daemon's after-run
 * life from the command line, through the client derived from the HTTP contract.
 *
 *   palyra tasks list [--state S] [--kind K] [--limit N] [--json] | cancel ID [--json]       (operators)
 *   palyra learning list [--status pending|accepted|rejected] [--json] | accept ID | reject ID [--reason …]
 *   palyra incidents [--open] [--json]                                                        (operators)
 *   palyra memory search QUERY… [--limit N] [--json] | forget ID [--json]
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Api } from "@palyra/transport-http"
import { Effect, Option, Schema } from "effect"
import { type Connection, connect, connectionOptions, type Daemon } from "../internal/cli/client.js"
import { type CliFailure, json, out } from "../internal/cli/io.js"

const jsonFlag = Options.boolean("json").pipe(
  Options.withDescription("print one JSON document (the API's encoding) on stdout, and nothing else")
)
const withDaemon = <A, R>(connection: Connection, f: (daemon: Daemon) => Effect.Effect<A, CliFailure, R>) =>
  Effect.flatMap(connect(connection), f)
const some = <K extends string, A>(key: K, o: Option.Option<A>) =>
  Option.match(o, { onNone: () => ({}), onSome: (value) => ({ [key]: value }) as { [P in K]: A } })
const when = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString())

// ---- tasks ----------------------------------------------------------------------------------

const R = Api.BackgroundRecords
const encodeTask = Schema.encodeSync(R.Task)
const encodeTasks = Schema.encodeSync(Schema.Array(R.Task))
const taskLine = (t: {
  id: string
  kind: string
  state: string
  attempts: number
  maxAttempts: number
  updatedAt: number
  lastError: string | null
}) =>
  `${t.id}  ${t.state.padEnd(9)} ${t.kind}  attempt ${t.attempts}/${t.maxAttempts}  ${when(t.updatedAt)}${t.lastError === null ? "" : `  — ${t.lastError}`}\n`

const tasksList = Command.make(
  "list",
  {
    ...connectionOptions,
    json: jsonFlag,
    state: Options.choice("state", ["queued", "running", "succeeded", "failed", "cancelled", "expired"] as const).pipe(
      Options.optional
    ),
    kind: Options.text("kind").pipe(Options.optional),
    limit: Options.integer("limit").pipe(Options.withDefault(100))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const list = yield* d.call((api) =>
          api.tasks.list({ urlParams: { limit: o.limit, ...some("state", o.state), ...some("kind", o.kind) } })
        )
        if (o.json) return yield* json(encodeTasks(list))
        if (list.length === 0) yield* out("no background tasks\n")
        for (const t of list) yield* out(taskLine(t))
      })
    )
).pipe(Command.withDescription("background tasks, newest first (operators)"))

const tasksCancel = Command.make(
  "cancel",
  { ...connectionOptions, json: jsonFlag, id: Args.text({ name: "task-id" }) },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const t = yield* d.call((api) => api.tasks.cancel({ path: { id: o.id } }))
        if (o.json) return yield* json(encodeTask(t))
        yield* out(`${t.id}: ${t.state}\n`)
      })
    )
).pipe(Command.withDescription("cancel a background task that has not ended (operators)"))

/** `palyra tasks list|cancel`. @since 0.1.0 @category Commands */
export const tasks = Command.make("tasks").pipe(
  Command.withDescription("the background queue (reflections, memory purges)"),
  Command.withSubcommands([tasksList, tasksCancel])
)

// ---- learning -------------------------------------------------------------------------------

const encodeCandidates = Schema.encodeSync(Schema.Array(R.Candidate))
const encodeDecided = Schema.encodeSync(R.Decided)
const candidateLine = (c: {
  id: string
  kind: string
  confidenceBps: number
  status: string
  text: string
  principal: string
}) =>
  `${c.id}  ${c.status.padEnd(8)} ${c.kind.padEnd(10)} ${String(c.confidenceBps).padStart(5)} bps  ${c.principal}: ${c.text}\n`

const learningList = Command.make(
  "list",
  {
    ...connectionOptions,
    json: jsonFlag,
    status: Options.choice("status", ["pending", "accepted", "rejected"] as const).pipe(Options.withDefault("pending"))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const list = yield* d.call((api) => api.learning.candidates({ urlParams: { status: o.status } }))
        if (o.json) return yield* json(encodeCandidates(list))
        if (list.length === 0) yield* out(`no ${o.status} candidates\n`)
        for (const c of list) yield* out(candidateLine(c))
      })
    )
).pipe(Command.withDescription("what post-run reflection proposed to remember (pending by default)"))

const candidateId = Args.text({ name: "candidate-id" })

const learningAccept = Command.make("accept", { ...connectionOptions, json: jsonFlag, id: candidateId }, (o) =>
  withDaemon(o, (d) =>
    Effect.gen(function* () {
      const r = yield* d.call((api) => api.learning.accept({ path: { id: o.id } }))
      if (o.json) return yield* json(encodeDecided(r))
      yield* out(`${r.candidate.id}: accepted${r.item === null ? "" : ` as memory item ${r.item.id}`}\n`)
    })
  )
).pipe(Command.withDescription("accept a pending candidate: it is written to memory"))

const learningReject = Command.make(
  "reject",
  {
    ...connectionOptions,
    json: jsonFlag,
    id: candidateId,
    reason: Options.text("reason").pipe(Options.withDescription("why (recorded)"), Options.optional)
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const r = yield* d.call((api) => api.learning.reject({ path: { id: o.id }, payload: some("reason", o.reason) }))
        if (o.json) return yield* json(encodeDecided(r))
        yield* out(`${r.candidate.id}: rejected\n`)
      })
    )
).pipe(Command.withDescription("reject a pending candidate"))

/** `palyra learning list|accept|reject`. @since 0.1.0 @category Commands */
export const learning = Command.make("learning").pipe(
  Command.withDescription("review what the agent learned from finished runs"),
  Command.withSubcommands([learningList, learningAccept, learningReject])
)

// ---- incidents ------------------------------------------------------------------------------

const encodeIncidents = Schema.encodeSync(Schema.Array(R.Incident))

/** `palyra incidents [--open]`. @since 0.1.0 @category Commands */
export const incidents = Command.make(
  "incidents",
  {
    ...connectionOptions,
    json: jsonFlag,
    open: Options.boolean("open").pipe(Options.withDescription("only incidents still open"))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const list = yield* d.call((api) => api.incidents.list({ urlParams: o.open ? { open: "true" } : {} }))
        if (o.json) return yield* json(encodeIncidents(list))
        if (list.length === 0) yield* out(o.open ? "no open incidents\n" : "no incidents\n")
        for (const i of list)
          yield* out(
            `${i.id}  ${i.state.padEnd(8)} ${i.kind}  ${when(i.openedAt)}  action: ${i.action}\n    ${i.detail}\n`
          )
      })
    )
).pipe(
  Command.withDescription("what the watchdog noticed: stuck runs, lost task leases, waiting approvals (operators)")
)

// ---- memory ---------------------------------------------------------------------------------

const encodeHits = Schema.encodeSync(Schema.Array(R.MemoryHit))

const memorySearch = Command.make(
  "search",
  {
    ...connectionOptions,
    json: jsonFlag,
    query: Args.text({ name: "query" }).pipe(Args.repeated),
    limit: Options.integer("limit").pipe(Options.withDefault(10))
  },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const hits = yield* d.call((api) => api.memory.search({ urlParams: { q: o.query.join(" "), limit: o.limit } }))
        if (o.json) return yield* json(encodeHits(hits))
        if (hits.length === 0) yield* out("nothing remembered matches\n")
        for (const h of hits) yield* out(`${h.item.id}  ${h.score.toFixed(3)}  [${h.item.kind}] ${h.item.text}\n`)
      })
    )
).pipe(Command.withDescription("search what the agent remembers about you"))

const memoryForget = Command.make(
  "forget",
  { ...connectionOptions, json: jsonFlag, id: Args.text({ name: "item-id" }) },
  (o) =>
    withDaemon(o, (d) =>
      Effect.gen(function* () {
        const r = yield* d.call((api) => api.memory.forget({ path: { id: o.id } }))
        if (o.json) return yield* json(r)
        yield* out(`forgot ${r.forgotten}\n`)
      })
    )
).pipe(Command.withDescription("forget one of your memory items"))

/** `palyra memory search|forget`. @since 0.1.0 @category Commands */
export const memory = Command.make("memory").pipe(
  Command.withDescription("what the agent remembers about you"),
  Command.withSubcommands([memorySearch, memoryForget])
)

/**
 * `palyra.v1.BackgroundService`: each call is one call of core's `Background` service
 * (`@palyra/core/memory`), which authorizes; without it every call answers NOT_FOUND ("feature …
 * not found").
 */
import { create } from "@bufbuild/protobuf"
import type { ConnectRouter, HandlerContext } from "@connectrpc/connect"
import { type Caller, Errors, type Gateway } from "@palyra/core"
import { Background, type MemoryStore, type TaskQueue, type Watchdog } from "@palyra/core/memory"
import { Effect, Option } from "effect"
import * as pb from "../gen/palyra/v1/gateway_pb.js"

type Run = <A>(
  ctx: HandlerContext,
  f: (gateway: Gateway.Service, caller: Caller.Caller) => Effect.Effect<A, unknown, Gateway.Gateway>
) => Promise<A>

const TASK_STATES: ReadonlyArray<TaskQueue.TaskState> = [
  "queued",
  "running",
  "succeeded",
  "failed",
  "cancelled",
  "expired"
]
const STATUSES: ReadonlyArray<MemoryStore.CandidateStatus> = ["pending", "accepted", "rejected"]

const toPbTask = (t: TaskQueue.Task) =>
  create(pb.BackgroundTaskSchema, {
    id: t.id,
    kind: t.kind,
    state: t.state,
    attempts: t.attempts,
    maxAttempts: t.maxAttempts,
    payloadJson: JSON.stringify(t.payload),
    lastError: t.lastError ?? "",
    createdAt: BigInt(t.createdAt),
    updatedAt: BigInt(t.updatedAt),
    finishedAt: BigInt(t.finishedAt ?? 0)
  })

const toPbCandidate = (c: MemoryStore.Candidate) =>
  create(pb.LearningCandidateSchema, {
    id: c.id,
    principal: c.principal,
    kind: c.kind,
    text: c.text,
    confidenceBps: c.confidenceBps,
    status: c.status,
    sourceRunId: c.sourceRunId ?? "",
    createdAt: BigInt(c.createdAt),
    itemId: c.itemId ?? ""
  })

const toPbIncident = (i: Watchdog.Incident) =>
  create(pb.IncidentSchema, {
    id: i.id,
    kind: i.kind,
    subject: i.subject,
    sessionId: i.sessionId ?? "",
    openedAt: BigInt(i.openedAt),
    detail: i.detail,
    action: i.action,
    state: i.state,
    resolvedAt: BigInt(i.resolvedAt ?? 0)
  })

const oneOf = <A extends string>(field: string, allowed: ReadonlyArray<A>, value: string) =>
  value === ""
    ? Effect.succeed(undefined)
    : allowed.includes(value as A)
      ? Effect.succeed(value as A)
      : Effect.fail(new Errors.InvalidArgument({ message: `${field} must be one of ${allowed.join(", ")}`, field }))

/** Register `BackgroundService` on the router. @internal */
export const backgroundRoutes = (router: ConnectRouter, run: Run) => {
  const withBackground = <A>(
    ctx: HandlerContext,
    feature: string,
    f: (b: Background.Service, caller: Caller.Caller) => Effect.Effect<A, unknown>
  ) =>
    run(ctx, (_g, caller) =>
      Effect.flatMap(Effect.serviceOption(Background.Background), (b) =>
        Option.isSome(b) ? f(b.value, caller) : Effect.fail(new Errors.NotFound({ entity: "feature", id: feature }))
      )
    )
  router.service(pb.BackgroundService, {
    listTasks: (req, ctx) =>
      withBackground(ctx, "tasks", (b, caller) =>
        Effect.gen(function* () {
          const state = yield* oneOf("state", TASK_STATES, req.state)
          const tasks = yield* b.listTasks(caller, {
            states: state === undefined ? undefined : [state],
            kind: req.kind || undefined,
            limit: req.limit === 0 ? 100 : Math.min(req.limit, 1_000)
          })
          return create(pb.ListTasksResponseSchema, { tasks: tasks.map(toPbTask) })
        })
      ),
    cancelTask: (req, ctx) =>
      withBackground(ctx, "tasks", (b, caller) =>
        Effect.map(b.cancelTask(caller, req.taskId), (task) =>
          create(pb.CancelTaskResponseSchema, { task: toPbTask(task) })
        )
      ),
    listLearningCandidates: (req, ctx) =>
      withBackground(ctx, "learning", (b, caller) =>
        Effect.gen(function* () {
          const status = yield* oneOf("status", STATUSES, req.status)
          const list = yield* b.listCandidates(caller, { status, principal: req.principal || undefined })
          return create(pb.ListLearningCandidatesResponseSchema, { candidates: list.map(toPbCandidate) })
        })
      ),
    decideLearningCandidate: (req, ctx) =>
      withBackground(ctx, "learning", (b, caller) =>
        Effect.map(
          b.decideCandidate(caller, req.candidateId, req.accept ? "accept" : "reject", req.reason || undefined),
          (r) => create(pb.DecideLearningCandidateResponseSchema, { candidate: toPbCandidate(r.candidate) })
        )
      ),
    listIncidents: (req, ctx) =>
      withBackground(ctx, "watchdog", (b, caller) =>
        Effect.map(
          b.incidents(caller, {
            state: req.openOnly ? "open" : undefined,
            limit: req.limit === 0 ? undefined : req.limit
          }),
          (list) => create(pb.ListIncidentsResponseSchema, { incidents: list.map(toPbIncident) })
        )
      ),
    searchMemory: (req, ctx) =>
      withBackground(ctx, "memory", (b, caller) =>
        Effect.map(
          b.searchMemory(caller, { text: req.query, limit: req.limit === 0 ? 10 : Math.min(req.limit, 50) }),
          (hits) =>
            create(pb.SearchMemoryResponseSchema, {
              hits: hits.map((h) =>
                create(pb.MemoryHitSchema, {
                  itemId: h.item.id,
                  kind: h.item.kind,
                  text: h.item.text,
                  score: h.score,
                  sourceRunId: h.item.sourceRunId ?? "",
                  updatedAt: BigInt(h.item.updatedAt)
                })
              )
            })
        )
      )
  })
}

/**
 * Handlers of the tasks, learning, incidents and memory groups: each is one call of core's
 * `Background` service (authorization is there). Without it (the daemon runs without these
 * features) every route answers 404 `not_found` ("feature … not found").
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Errors } from "@palyra/core"
import { Background } from "@palyra/core/memory"
import { Effect, Layer, Option } from "effect"
import { Api, CurrentCaller, RejectPayload } from "../Api.js"
import { readJson } from "./body.js"
import { answer, type HandlerOptions } from "./common.js"

const withBackground = <A, E, R>(
  service: Option.Option<Background.Service>,
  feature: string,
  f: (background: Background.Service) => Effect.Effect<A, E, R>
) =>
  answer<A, E | Errors.NotFound, R>(
    Option.isSome(service) ? f(service.value) : Effect.fail(new Errors.NotFound({ entity: "feature", id: feature }))
  )

const tasks = HttpApiBuilder.group(Api, "tasks", (handlers) =>
  Effect.gen(function* () {
    const service = yield* Effect.serviceOption(Background.Background)
    return handlers
      .handle("list", ({ urlParams }) =>
        withBackground(service, "tasks", (b) =>
          Effect.flatMap(CurrentCaller, (caller) =>
            b.listTasks(caller, {
              states: urlParams.state === undefined ? undefined : [urlParams.state],
              kind: urlParams.kind,
              limit: urlParams.limit
            })
          )
        )
      )
      .handle("cancel", ({ path }) =>
        withBackground(service, "tasks", (b) =>
          Effect.flatMap(CurrentCaller, (caller) => b.cancelTask(caller, path.id))
        )
      )
  })
)

const learning = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "learning", (handlers) =>
    Effect.gen(function* () {
      const service = yield* Effect.serviceOption(Background.Background)
      return handlers
        .handle("candidates", ({ urlParams }) =>
          withBackground(service, "learning", (b) =>
            Effect.flatMap(CurrentCaller, (caller) =>
              b.listCandidates(caller, { status: urlParams.status, principal: urlParams.principal })
            )
          )
        )
        .handle("accept", ({ path }) =>
          withBackground(service, "learning", (b) =>
            Effect.flatMap(CurrentCaller, (caller) => b.decideCandidate(caller, path.id, "accept"))
          )
        )
        .handleRaw("reject", ({ path }) =>
          withBackground(service, "learning", (b) =>
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(RejectPayload, options.limits)
              return yield* b.decideCandidate(caller, path.id, "reject", body.reason)
            })
          )
        )
    })
  )

const incidents = HttpApiBuilder.group(Api, "incidents", (handlers) =>
  Effect.gen(function* () {
    const service = yield* Effect.serviceOption(Background.Background)
    return handlers.handle("list", ({ urlParams }) =>
      withBackground(service, "watchdog", (b) =>
        Effect.flatMap(CurrentCaller, (caller) =>
          b.incidents(caller, {
            state: urlParams.open === undefined ? undefined : urlParams.open === "true" ? "open" : "resolved",
            limit: urlParams.limit
          })
        )
      )
    )
  })
)

const memory = HttpApiBuilder.group(Api, "memory", (handlers) =>
  Effect.gen(function* () {
    const service = yield* Effect.serviceOption(Background.Background)
    return handlers
      .handle("search", ({ urlParams }) =>
        withBackground(service, "memory", (b) =>
          Effect.flatMap(CurrentCaller, (caller) =>
            b.searchMemory(caller, { text: urlParams.q, limit: urlParams.limit })
          )
        )
      )
      .handle("forget", ({ path }) =>
        withBackground(service, "memory", (b) =>
          Effect.flatMap(CurrentCaller, (caller) => Effect.as(b.forgetMemory(caller, path.id), { forgotten: path.id }))
        )
      )
  })
)

/** The handlers of the four groups. @internal */
export const backgroundHandlers = (options: HandlerOptions) =>
  Layer.mergeAll(tasks, learning(options), incidents, memory)

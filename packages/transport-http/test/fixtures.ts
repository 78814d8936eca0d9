/**
 * A real server on 127.0.0.1 over a real kernel (in-memory journal, Cedar policy, a scripted
 * model), for the transport's tests.
 */

import { request as httpRequest } from "node:http"
import { type Gateway, Journal, type ScriptedModel, type Tool } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { AfterRun, MemoryStore, TaskQueue } from "@palyra/core/memory"
import { type GatewayLayerOptions, gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, Layer, ManagedRuntime, Schedule, Scope } from "effect"
import { HttpTransport } from "../src/index.js"

export const TOKENS = [
  { token: "alice-token", principal: "alice" },
  { token: "bob-token", principal: "bob" },
  { token: "operator-token", principal: "operator", operator: true }
] as const

export const ALICE = { authorization: "Bearer alice-token" }
export const BOB = { authorization: "Bearer bob-token" }
export const OPERATOR = { authorization: "Bearer operator-token" }

export interface TestServer {
  readonly base: string
  readonly port: number
  /** Everything stored, in a form that changes whenever anything is written. */
  readonly snapshot: () => Promise<string>
  /** Wait (polling with a real delay) until no run is pending, accepted or in progress. */
  readonly quiet: () => Promise<void>
  readonly close: () => Promise<void>
}

export const startServer = async (options: {
  readonly model: ScriptedModel.ScriptedModel
  readonly tools?: ReadonlyArray<Tool.AnyTool>
  readonly gateway?: Omit<GatewayLayerOptions, "model" | "tools" | "policy">
  readonly serve?: Partial<HttpTransport.ServeOptions>
  /** Memory, learning (deterministic), the task worker and an observing watchdog, in memory. */
  readonly afterRun?: boolean
}): Promise<TestServer> => {
  const kernel = {
    ...options.gateway,
    model: options.model,
    tools: options.tools ?? [],
    policy: CedarPolicy.layer()
  }
  const afterRun = options.afterRun
    ? AfterRun.make({
        store: Effect.runSync(MemoryStore.makeMemory()),
        queue: Effect.runSync(TaskQueue.makeMemory()),
        memory: {},
        learning: { extractor: "deterministic" },
        watchdog: { mode: "observe", interval: "1 hour" },
        worker: { pollInterval: "20 millis" }
      })
    : undefined
  const runtime = ManagedRuntime.make(
    (afterRun === undefined
      ? gatewayLayer(kernel)
      : afterRun.layer.pipe(Layer.provideMerge(gatewayLayer(afterRun.options(kernel))))) as Layer.Layer<
      Gateway.Gateway | Journal.Journal
    >
  )
  const scope = await runtime.runPromise(Scope.make())
  const { url, port } = await runtime.runPromise(
    HttpTransport.serve({ port: 0, tokens: TOKENS, maxBodyBytes: 64 * 1024, ...options.serve }).pipe(
      Scope.extend(scope)
    )
  )
  const snapshot = Effect.gen(function* () {
    const journal = yield* Journal.Journal
    const verified = yield* journal.verify
    const sessions = yield* journal.listSessions({ includeArchived: true })
    const runs = yield* journal.listRuns({})
    const approvals = yield* journal.listApprovals({})
    return JSON.stringify({ verified, sessions, runs, approvals })
  })
  const busy = Effect.flatMap(Journal.Journal, (journal) =>
    journal.listRuns({ states: ["Pending", "Accepted", "InProgress"] })
  )
  return {
    base: url,
    port,
    snapshot: () => runtime.runPromise(snapshot),
    quiet: () =>
      runtime.runPromise(
        busy.pipe(
          Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (runs) => runs.length === 0 }),
          Effect.timeout("10 seconds"),
          Effect.asVoid
        )
      ),
    close: async () => {
      await runtime.runPromise(Scope.close(scope, Exit.void))
      await runtime.dispose()
    }
  }
}

export interface RawResponse {
  readonly status: number
  readonly headers: Record<string, string | Array<string> | undefined>
  readonly body: string
}

/**
 * One request with `node:http`, byte for byte: the path is sent as given (no URL normalisation)
 * and the body as raw bytes.
 */
export const raw = (
  port: number,
  method: string,
  path: string,
  options: { readonly headers?: Record<string, string | number>; readonly body?: Uint8Array | string } = {}
): Promise<RawResponse> =>
  new Promise((resolve, reject) => {
    const body = options.body === undefined ? undefined : Buffer.from(options.body)
    const request = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        headers: {
          ...(body === undefined ? {} : { "content-type": "application/json", "content-length": body.length }),
          ...options.headers
        }
      },
      (response) => {
        const chunks: Array<Buffer> = []
        response.on("data", (chunk: Buffer) => chunks.push(chunk))
        response.on("end", () =>
          resolve({
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: Buffer.concat(chunks).toString()
          })
        )
        response.on("error", reject)
      }
    )
    request.on("error", reject)
    if (body !== undefined) request.write(body)
    request.end()
  })

/** A response's JSON body, loosely typed for assertions. */
// biome-ignore lint/suspicious/noExplicitAny: tests read loosely shaped JSON
export const json = (response: Response): Promise<any> => response.json()

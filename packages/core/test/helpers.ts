import type { Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, Layer, Schema } from "effect"
import {
  Caller,
  Follower,
  Gateway,
  Journal,
  MemoryJournal,
  type ScriptedModel,
  type TapeEvent,
  Tool
} from "../src/index.js"
import { type GatewayLayerOptions, gatewayLayer } from "../src/testing.js"

/** A low-risk tool that records each execution, so tests can prove whether its body ran. */
export const recordingTool = (
  name: string,
  risk: "low" | "sensitive" | "critical",
  extra: Partial<Tool.ToolOptions<{ readonly x: number }>> = {}
) => {
  const calls: Array<{ x: number }> = []
  const tool = Tool.make(name, {
    description: `test tool ${name}`,
    parameters: Schema.Struct({ x: Schema.Number }),
    risk,
    execute: (args) =>
      Effect.sync(() => {
        calls.push(args)
        return { doubled: args.x * 2 }
      }),
    ...extra
  })
  return { tool, calls }
}

/** Run `body` with a Gateway built from `options`, in its own scope. */
export const withGateway = <A, E>(
  options: Omit<GatewayLayerOptions, "model"> & { model: ScriptedModel.ScriptedModel },
  body: (gateway: Gateway.Service, journal: Journal.Service) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const journal = yield* Journal.Journal
    return yield* body(gateway, journal)
  }).pipe(Effect.provide(gatewayLayer(options) as Layer.Layer<Gateway.Gateway | Journal.Journal>), Effect.scoped)

/**
 * The run's first pending approval, once there is one. Polls without a delay: right for the
 * in-memory journal under TestClock (a live SQLite test must poll with a real delay instead).
 */
export const pendingApproval = (gateway: Gateway.Service, runId: Parameters<Gateway.Service["getRun"]>[1]) =>
  gateway.listApprovals(Caller.operator("op"), { runId, status: "pending" }).pipe(
    Effect.repeat({ until: (l) => l.length > 0 }),
    Effect.map((l) => l[0]!)
  )

/**
 * `inner` with its `readTape` calls counted (`reads.count`): to prove a path reads nothing back. The
 * record reads a turn may make are counted too: `getSession` (`reads.sessions`), `findSessionByKey`
 * (`reads.keys`), `getRun` (`reads.runs`).
 */
export const countingReads = (inner: Journal.Service) => {
  const reads = { count: 0, sessions: 0, keys: 0, runs: 0 }
  const journal: Journal.Service = {
    ...inner,
    readTape: (sessionId, options) =>
      Effect.suspend(() => {
        reads.count++
        return inner.readTape(sessionId, options)
      }),
    getSession: (id) =>
      Effect.suspend(() => {
        reads.sessions++
        return inner.getSession(id)
      }),
    findSessionByKey: (principal, key) =>
      Effect.suspend(() => {
        reads.keys++
        return inner.findSessionByKey(principal, key)
      }),
    getRun: (id) =>
      Effect.suspend(() => {
        reads.runs++
        return inner.getRun(id)
      })
  }
  return { journal, reads }
}

/** A memory journal keeping each append's stored events, one group per commit, in order. */
export const recordingAppends = (options?: Parameters<typeof MemoryJournal.layer>[0]) => {
  const groups: Array<ReadonlyArray<TapeEvent.TapeEvent>> = []
  const layer = Layer.effect(
    Journal.Journal,
    Effect.map(Journal.Journal, (inner) => ({
      ...inner,
      append: (sessionId, events, effects) =>
        Effect.tap(inner.append(sessionId, events, effects), (stored) => Effect.sync(() => void groups.push(stored)))
    }))
  ).pipe(Layer.provide(MemoryJournal.layer(options)))
  return { groups, layer }
}

/**
 * Everything a follower delivers until its run ends — or through the first batch with an event for
 * which `until` holds (waiting with `onReady`, never polling; published events: no read of the tape).
 */
export const drain = (follower: Follower.Follower, until?: (e: TapeEvent.TapeEvent) => boolean) =>
  Effect.promise(async () => {
    const out: Array<TapeEvent.TapeEvent> = []
    for (;;) {
      const r = follower.take()
      if (r === Follower.Done) return out
      if (Follower.isFailed(r)) throw r.failure
      if (r === undefined) await new Promise<void>((wake) => follower.onReady(wake))
      else {
        out.push(...r)
        if (until !== undefined && r.some(until)) return out
      }
    }
  })

/** Listens on an ephemeral port of 127.0.0.1; resolves with the server's base URL. */
export const listenLocal = (server: Server) =>
  new Promise<string>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`))
  )

/** Closes a server and every connection still open on it. */
export const closeServer = (server: Server) =>
  new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  })

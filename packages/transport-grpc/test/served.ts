/**
 * What the gRPC tests share: a runtime's `GrpcTransport.serve` (or another serve, e.g. the lazy
 * server's) on 127.0.0.1 from `beforeAll` to `afterAll`, and a bearer-token `Interceptor` for
 * connect-es clients.
 */
import type { Interceptor } from "@connectrpc/connect"
import type { Gateway, Journal } from "@palyra/core"
import { type Effect, Exit, type ManagedRuntime, Scope } from "effect"
import { afterAll, beforeAll } from "vitest"
import { GrpcTransport } from "../src/index.js"

/** The test token of principal `alice` (long enough for the transport's token rules). */
export const TOKEN = "alice-token-0123456789"

/**
 * Serves in `runtime` for the file's tests (by default `GrpcTransport.serve` with `TOKEN` as alice);
 * `url` is set once served. The runtime is disposed after.
 */
export const servedFor = (
  runtime: ManagedRuntime.ManagedRuntime<Gateway.Gateway | Journal.Journal, never>,
  serve: Effect.Effect<{ readonly url: string }, unknown, Gateway.Gateway | Scope.Scope> = GrpcTransport.serve({
    port: 0,
    tokens: [{ token: TOKEN, principal: "alice" }]
  })
) => {
  const served = { url: "" }
  let scope: Scope.CloseableScope
  beforeAll(async () => {
    scope = await runtime.runPromise(Scope.make())
    served.url = (await runtime.runPromise(serve.pipe(Scope.extend(scope)))).url
  })
  afterAll(async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  })
  return served
}

/** Sends `authorization: Bearer <token>` on every request. */
export const bearer =
  (token: string = TOKEN): Interceptor =>
  (next) =>
  (req) => {
    req.header.set("authorization", `Bearer ${token}`)
    return next(req)
  }

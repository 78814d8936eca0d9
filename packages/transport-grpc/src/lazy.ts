/**
 * `@palyra/transport-grpc/lazy`: the gRPC transport's server with its services loaded on the first
 * request. It listens at once, like `GrpcTransport.serve`, but the generated protobuf descriptors,
 * connect-es and the handlers (a fifth of a daemon's module evaluation at start) are imported when
 * the first request arrives, which waits for them once. What palyrad mounts: most daemons never see a
 * gRPC request in their first seconds, and every one of them pays its start-up.
 *
 * @since 0.1.0
 */
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2"
import type { Gateway } from "@palyra/core"
import { Effect, Runtime } from "effect"
import type * as GrpcTransport from "./GrpcTransport.js"
import { listen } from "./internal/listen.js"

type Handle = (req: Http2ServerRequest, res: Http2ServerResponse) => void

/**
 * Serve gRPC, gRPC-Web and Connect (HTTP/2 cleartext) until the scope closes, loading the services
 * on the first request. Behaves exactly like `GrpcTransport.serve` once loaded; a request that
 * arrives while they load waits (its body stays buffered under HTTP/2 flow control). If the import
 * fails the request is answered 503 and logged, and the next request tries again.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const serve: typeof GrpcTransport.serve = (options) =>
  Effect.gen(function* () {
    const runtime = yield* Effect.runtime<Gateway.Gateway>()
    const shutdown = new AbortController()
    let loaded: Handle | undefined
    let loading: Promise<Handle> | undefined
    const load = () =>
      (loading ??= import("./GrpcTransport.js").then(
        (m) => (loaded = m.handler(runtime, options, shutdown.signal)),
        (cause: unknown) => {
          loading = undefined
          throw cause
        }
      ))
    const handle: Handle = (req, res) => {
      if (loaded !== undefined) return loaded(req, res)
      load().then(
        (h) => h(req, res),
        (cause: unknown) => {
          Runtime.runFork(runtime)(Effect.logError("gRPC services failed to load", cause))
          if (!res.headersSent) res.writeHead(503)
          res.end()
        }
      )
    }
    return yield* listen(options.host ?? "127.0.0.1", options.port, handle, shutdown)
  })

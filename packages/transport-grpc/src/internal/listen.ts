/**
 * An HTTP/2 cleartext server on host:port for the scope's lifetime. Shared by `GrpcTransport.serve`
 * and `@palyra/transport-grpc/lazy`, and free of the generated protobuf code on purpose: the lazy
 * entry must be able to listen without loading it.
 */
import { createServer, type Http2Server, type Http2ServerRequest, type Http2ServerResponse } from "node:http2"
import type { AddressInfo } from "node:net"
import { Errors } from "@palyra/core"
import { Effect, type Scope } from "effect"

/** Where a server listens. */
export interface Listening {
  readonly url: string
  readonly port: number
}

/**
 * Listen with `handle`; closing the scope aborts `shutdown` (open streams end) and closes the server,
 * dropping sessions still open after 500 ms so shutdown is bounded.
 */
export const listen = (
  host: string,
  port: number,
  handle: (req: Http2ServerRequest, res: Http2ServerResponse) => void,
  shutdown: AbortController
): Effect.Effect<Listening, Errors.InvalidArgument, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.async<Http2Server, Errors.InvalidArgument>((resume) => {
        const s = createServer(handle)
        s.once("error", (e) =>
          resume(Effect.fail(new Errors.InvalidArgument({ message: `cannot listen on ${host}:${port}: ${e.message}` })))
        )
        s.listen(port, host, () => resume(Effect.succeed(s)))
      }),
      (s) =>
        Effect.async<void>((resume) => {
          shutdown.abort()
          s.close(() => resume(Effect.void))
          setTimeout(() => resume(Effect.void), 500).unref()
        })
    ),
    (server) => {
      const bound = (server.address() as AddressInfo).port
      return { url: `http://${host.includes(":") ? `[${host}]` : host}:${bound}`, port: bound }
    }
  )

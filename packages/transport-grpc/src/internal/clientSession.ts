/**
 * The Node client's HTTP/2 session with a connection-level receive window sized for many streams.
 *
 * HTTP/2 has two flow-control windows: one per stream (the `initialWindowSize` setting) and one for
 * the whole connection, which starts at 65,535 bytes and can only be raised by the receiver
 * (`setLocalWindowSize`). Node's client keeps that default, so every stream multiplexed on one
 * connection shares 64 KiB of credit: with a few hundred `RunStream`s on one session, a burst of
 * events exhausts it and the server's frames wait in its outbound queue for the client's next
 * `WINDOW_UPDATE` — a round trip through the client's event loop, paid by every stream at once
 * (measured: the server's remote window at 0 with 178 frames queued at 200 streams; SSE, one TCP
 * connection per stream with auto-tuned buffers, has no such shared limit). gRPC's own clients grow
 * this window (C-core and Go estimate the bandwidth-delay product); this sets it once per session.
 *
 * @since 0.1.0
 */
import type * as http2 from "node:http2"
import { Http2SessionManager } from "@connectrpc/connect-node"

/** The connection window the client advertises: 4 MiB (per-stream windows stay at Node's default). @since 0.1.0 @category Constants */
export const connectionWindowBytes = 4 * 1024 * 1024

const widened = new WeakSet<http2.Http2Session>()

/**
 * connect-es's session manager, with the connection's receive window raised to
 * `connectionWindowBytes` on each new session (before its first stream's response is read).
 *
 * @since 0.1.0
 * @category Constructors
 */
export class WideWindowSessionManager extends Http2SessionManager {
  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options)
    const session = stream.session
    if (session !== undefined && !widened.has(session) && !session.destroyed) {
      widened.add(session)
      if (session.state.localWindowSize !== undefined && session.state.localWindowSize < connectionWindowBytes) {
        session.setLocalWindowSize(connectionWindowBytes)
      }
    }
    return stream
  }
}

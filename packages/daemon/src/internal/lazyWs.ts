/**
 * What palyrad's bundle gives `@effect/platform-node` for `import * as WS from "ws"` (tsup's
 * `lazyShims` plugin): the two constructors it uses, which load `ws` on their first call. platform-node
 * imports `ws` at the top of its HTTP server and socket modules but constructs a `WebSocketServer`
 * only on an upgrade request that asks for a WebSocket (and a `WebSocket` only as a client): bundled
 * as it is, `ws`' CommonJS body (and `node:https` and `zlib`, which it requires) would run at every start. Here the
 * `require` is the bundle's own (esbuild inlines `ws` and calls its body here, once, on first use).
 *
 * @since 0.1.0
 */

type Constructor = new (...args: ReadonlyArray<unknown>) => object

interface WsModule {
  readonly WebSocket: Constructor
  readonly WebSocketServer: Constructor
}

let loaded: WsModule | undefined

/** `ws`, loaded on the first call. */
const load = (): WsModule => {
  loaded ??= require("ws") as WsModule
  return loaded
}

// Plain functions, not classes: `new` on a function that returns an object yields that object, so
// callers get `ws`' own instances (its methods, events and `instanceof` unchanged).

/** `ws`' `WebSocketServer`, loaded on first construction. @since 0.1.0 @category Internal */
export const WebSocketServer = function WebSocketServer(...args: ReadonlyArray<unknown>) {
  return new (load().WebSocketServer)(...args)
} as unknown as Constructor

/** `ws`' `WebSocket`, loaded on first construction. @since 0.1.0 @category Internal */
export const WebSocket = function WebSocket(...args: ReadonlyArray<unknown>) {
  return new (load().WebSocket)(...args)
} as unknown as Constructor

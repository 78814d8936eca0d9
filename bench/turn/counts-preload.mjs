// Preloaded into palyrad by `counts.mjs` (`node --import`): counts, on the daemon's main thread, what
// a turn does — thread hand-offs, JSON work, SHA-256s, timers, promises, Effect fibers, socket writes
// and bytes (the client's socket apart from the model's), SQL statements run on the main thread — and
// writes the running totals to $COUNTS_OUT on SIGWINCH. Counting costs CPU: read counts, not timings.
import { createHook } from "node:async_hooks"
import crypto from "node:crypto"
import fs from "node:fs"
import { createRequire } from "node:module"
import net from "node:net"
import { isMainThread, MessagePort } from "node:worker_threads"

if (isMainThread && process.argv[1]?.includes("palyrad")) {
  const counts = Object.create(null)
  const inc = (key, n = 1) => (counts[key] = (counts[key] ?? 0) + n)
  const wrap = (obj, name, key, also) => {
    const original = obj[name]
    obj[name] = function (...args) {
      inc(key)
      also?.call(this, args)
      return original.apply(this, args)
    }
  }
  // `Worker#postMessage` posts through its port: one hand-off counts once here.
  wrap(MessagePort.prototype, "postMessage", "postMessage")
  wrap(JSON, "stringify", "JSON.stringify")
  wrap(JSON, "parse", "JSON.parse")
  wrap(crypto, "createHash", "createHash")
  if (crypto.hash) wrap(crypto, "hash", "crypto.hash")
  wrap(globalThis, "setTimeout", "setTimeout")
  wrap(globalThis, "setImmediate", "setImmediate")
  wrap(process, "nextTick", "nextTick")
  const side = (socket) => (socket.server ? "client socket" : "model socket")
  wrap(net.Socket.prototype, "_writev", "writes", function ([chunks]) {
    inc(`writes: ${side(this)}`)
    inc(
      `bytes: ${side(this)}`,
      chunks.reduce((n, c) => n + (c.chunk.length ?? 0), 0)
    )
  })
  wrap(net.Socket.prototype, "_write", "writes", function ([chunk]) {
    inc(`writes: ${side(this)}`)
    inc(`bytes: ${side(this)}`, chunk.length ?? 0)
  })
  createHook({
    init(_id, type) {
      if (type === "PROMISE") inc("promises")
    }
  }).enable()
  // Effect numbers every fiber from one global counter (`FiberId` ids): its growth is fibers begun.
  const fibers = () => {
    for (const name of Object.getOwnPropertyNames(globalThis)) {
      if (!name.startsWith("effect/GlobalValue")) continue
      for (const [key, value] of globalThis[name])
        if (String(key.description ?? key).includes("Fiber/Id/_fiberCounter")) return value.current ?? value
    }
    return -1
  }
  const Database = createRequire(process.argv[1])("better-sqlite3")
  const statement = Object.getPrototypeOf(new Database(":memory:").prepare("select 1"))
  for (const method of ["get", "all", "run", "iterate"]) {
    const original = statement[method]
    statement[method] = function (...args) {
      inc(`SQL ${this.source.replace(/\s+/g, " ").slice(0, 80)}`)
      return original.apply(this, args)
    }
  }
  const http = await import("node:http")
  const emit = http.Server.prototype.emit
  http.Server.prototype.emit = function (event, ...args) {
    if (event === "request") inc("requests")
    return emit.call(this, event, ...args)
  }
  process.on("SIGWINCH", () =>
    fs.writeFileSync(process.env.COUNTS_OUT, JSON.stringify({ ...counts, fibers: fibers() }))
  )
}

import diagnostics from "node:diagnostics_channel"
import { createServer, type IncomingHttpHeaders, type RequestListener, type Server } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import ipaddr from "ipaddr.js"
import { Agent, request } from "undici"
import { NetGuard } from "../src/tools.js"

// ---------------------------------------------------------------------------------------------
// Observation: every TCP client socket this process creates, and where it tried to connect.
// ---------------------------------------------------------------------------------------------

const attempts: Array<{ readonly ip: string; readonly port: number }> = []
let socketsCreated = 0
diagnostics.subscribe("net.client.socket", (message) => {
  socketsCreated++
  const socket = (message as { socket: Socket }).socket
  socket.on("connectionAttempt", (ip: string, port: number) => attempts.push({ ip, port }))
})

interface Listener {
  readonly port: number
  /** TCP connections accepted so far. */
  readonly connections: () => number
  /** Of those, how many have closed. */
  readonly closed: () => number
  readonly lastHeaders: () => IncomingHttpHeaders | undefined
}

const listen = (server: Server, host: string, port: number) =>
  new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(port, host, () => resolve())
  })

/**
 * A real HTTP server that counts the connections it accepts, on `hosts` (one port for all). The
 * canary listens on 127.0.0.1 and ::1, so any loopback spelling that got through would be seen.
 */
const serve = (hosts: ReadonlyArray<string>, handler: RequestListener, port = 0) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const state = { connections: 0, closed: 0, headers: undefined as IncomingHttpHeaders | undefined }
      const servers: Array<Server> = []
      for (const host of hosts) {
        const server = createServer((req, res) => {
          state.headers = req.headers
          handler(req, res)
        })
        server.on("connection", (socket) => {
          state.connections++
          socket.on("close", () => state.closed++)
        })
        await listen(server, host, port)
        port = (server.address() as AddressInfo).port
        servers.push(server)
      }
      return { servers, state, port }
    }),
    ({ servers }) =>
      Effect.promise(() =>
        Promise.all(
          servers.map(
            (s) =>
              new Promise<void>((r) => {
                s.closeAllConnections()
                s.close(() => r())
              })
          )
        )
      )
  ).pipe(
    Effect.map(
      ({ state, port }): Listener => ({
        port,
        connections: () => state.connections,
        closed: () => state.closed,
        lastHeaders: () => state.headers
      })
    )
  )

const pong: RequestListener = (_req, res) => {
  res.writeHead(200, { "content-type": "text/plain" })
  res.end("pong")
}
const canary = serve(["127.0.0.1", "::1"], pong)

const hostOf = (url: string) => new URL(url).hostname.replace(/^\[|\]$/g, "")
const text = (body: Uint8Array) => new TextDecoder().decode(body)

// ---------------------------------------------------------------------------------------------

/** URL host spellings that reach this machine, and why each must be refused. */
const loopbackSpellings: ReadonlyArray<readonly [string, "private_address" | "special_address"]> = [
  ["[::ffff:127.0.0.1]", "private_address"],
  ["[::ffff:7f00:1]", "private_address"],
  ["[::127.0.0.1]", "special_address"],
  ["[64:ff9b::7f00:1]", "special_address"],
  ["[2002:7f00:1::]", "special_address"],
  ["2130706433", "private_address"],
  ["0177.0.0.1", "private_address"],
  ["127.1", "private_address"],
  ["0x7f.1", "private_address"],
  ["localhost", "private_address"],
  ["0.0.0.0", "special_address"],
  ["[::]", "special_address"],
  ["[::1]", "private_address"]
]

describe("NetGuard.safeFetch refuses every spelling of this machine, without a socket", () => {
  for (const [spelling, reason] of loopbackSpellings) {
    it.scopedLive(`${spelling} (on the allowlist) → ${reason}`, () =>
      Effect.gen(function* () {
        const c = yield* canary
        const url = `http://${spelling}:${c.port}/`
        const sockets = socketsCreated
        const error = yield* Effect.flip(NetGuard.safeFetch(url, { allowHosts: [hostOf(url)] }))
        assert.strictEqual(error._tag, "FetchRefused")
        assert.strictEqual(error.reason, reason, error.message)
        assert.strictEqual(socketsCreated, sockets, "no socket was created")
        assert.strictEqual(c.connections(), 0)
      })
    )
  }

  it.scopedLive("an allowed name whose resolver answers 127.0.0.1 → private_address", () =>
    Effect.gen(function* () {
      const c = yield* canary
      const sockets = socketsCreated
      const error = yield* Effect.flip(
        NetGuard.safeFetch(`http://internal.example:${c.port}/`, {
          allowHosts: ["internal.example"],
          resolver: async () => ["127.0.0.1"]
        })
      )
      assert.strictEqual(error._tag === "FetchRefused" && error.reason, "private_address")
      assert.strictEqual(socketsCreated, sockets)
      assert.strictEqual(c.connections(), 0)
    })
  )

  it.scopedLive("every resolved address is checked: [public, 127.0.0.1] → private_address", () =>
    Effect.gen(function* () {
      const c = yield* canary
      const error = yield* Effect.flip(
        NetGuard.safeFetch(`http://mixed.example:${c.port}/`, {
          allowHosts: ["mixed.example"],
          resolver: async () => ["93.184.215.14", "127.0.0.1"]
        })
      )
      assert.strictEqual(error._tag === "FetchRefused" && error.reason, "private_address")
      assert.strictEqual(c.connections(), 0)
    })
  )

  it.scopedLive("a rebinding resolver (public, then 127.0.0.1) is asked once; the socket gets the public answer", () =>
    Effect.gen(function* () {
      const c = yield* canary
      let calls = 0
      const rebinding = async () => (++calls === 1 ? ["1.1.1.1"] : ["127.0.0.1"])
      const seen = attempts.length
      const result = yield* Effect.either(
        NetGuard.safeFetch(`http://rebind.example:${c.port}/`, {
          allowHosts: ["rebind.example"],
          resolver: rebinding,
          timeoutMs: 2_000
        })
      )
      // 1.1.1.1 is not reachable from here: the fetch fails, but on the network, not on loopback.
      assert.strictEqual(result._tag, "Left")
      if (result._tag === "Left") assert.strictEqual(result.left._tag, "FetchFailed")
      assert.strictEqual(calls, 1)
      assert.strictEqual(c.connections(), 0)
      assert.deepStrictEqual(
        attempts.slice(seen).map((a) => a.ip),
        ["1.1.1.1"]
      )
    })
  )

  it.scopedLive("pinning, seen from two servers: the connection goes to the first answer, not a later one", () =>
    Effect.gen(function* () {
      const first = yield* serve(["127.0.0.1"], pong)
      const second = yield* serve(["127.0.0.2"], pong, first.port)
      let calls = 0
      const response = yield* NetGuard.safeFetch(`http://pinned.example:${first.port}/`, {
        allowHosts: ["pinned.example"],
        allowPrivateNetworks: true,
        resolver: async () => (++calls === 1 ? ["127.0.0.1"] : ["127.0.0.2"])
      })
      assert.strictEqual(text(response.body), "pong")
      assert.strictEqual(calls, 1)
      assert.strictEqual(first.connections(), 1)
      assert.strictEqual(second.connections(), 0)
    })
  )

  it.scopedLive("special-purpose addresses stay refused with allowPrivateNetworks", () =>
    Effect.gen(function* () {
      const c = yield* canary
      for (const [spelling, reason] of loopbackSpellings.filter(([, r]) => r === "special_address")) {
        const url = `http://${spelling}:${c.port}/`
        const error = yield* Effect.flip(
          NetGuard.safeFetch(url, { allowHosts: [hostOf(url)], allowPrivateNetworks: true })
        )
        assert.strictEqual(error._tag === "FetchRefused" && error.reason, reason, spelling)
      }
      assert.strictEqual(c.connections(), 0)
    })
  )

  it.scopedLive("control: without the guard, 0.0.0.0, [::] and the mapped form do reach the canary", () =>
    Effect.gen(function* () {
      const c = yield* canary
      for (const host of ["0.0.0.0", "[::]", "[::ffff:7f00:1]"]) {
        yield* Effect.promise(async () => {
          const agent = new Agent()
          const response = await request(`http://${host}:${c.port}/`, { dispatcher: agent })
          await response.body.text()
          await agent.close()
        })
      }
      assert.strictEqual(c.connections(), 3)
    })
  )
})

describe("NetGuard.safeFetch with allowPrivateNetworks", () => {
  it.scopedLive("reaches the canary once", () =>
    Effect.gen(function* () {
      const c = yield* canary
      const response = yield* NetGuard.safeFetch(`http://127.0.0.1:${c.port}/ping`, {
        allowHosts: ["127.0.0.1"],
        allowPrivateNetworks: true
      })
      assert.strictEqual(response.status, 200)
      assert.strictEqual(text(response.body), "pong")
      assert.strictEqual(response.headers["content-type"], "text/plain")
      assert.isFalse(response.truncated)
      assert.strictEqual(c.connections(), 1)
    })
  )

  it.scopedLive("each private spelling reaches the canary (so the refusals above are the guard's doing)", () =>
    Effect.gen(function* () {
      const c = yield* canary
      const privateOnes = loopbackSpellings.filter(([, r]) => r === "private_address")
      for (const [spelling] of privateOnes) {
        const url = `http://${spelling}:${c.port}/`
        const response = yield* NetGuard.safeFetch(url, { allowHosts: [hostOf(url)], allowPrivateNetworks: true })
        assert.strictEqual(text(response.body), "pong", spelling)
      }
      assert.strictEqual(c.connections(), privateOnes.length)
    })
  )

  it.scopedLive("caps the body at maxBytes", () =>
    Effect.gen(function* () {
      const big = yield* serve(["127.0.0.1"], (_req, res) => res.end("x".repeat(100_000)))
      const response = yield* NetGuard.safeFetch(`http://127.0.0.1:${big.port}/`, {
        allowHosts: ["127.0.0.1"],
        allowPrivateNetworks: true,
        maxBytes: 1000
      })
      assert.strictEqual(response.body.length, 1000)
      assert.isTrue(response.truncated)
    })
  )

  it.scopedLive("refuses a Host header, a non-HTTP scheme and URL credentials, without a socket", () =>
    Effect.gen(function* () {
      const c = yield* canary
      const sockets = socketsCreated
      const options = { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true }
      const url = `http://127.0.0.1:${c.port}/`
      const host = yield* Effect.flip(NetGuard.safeFetch(url, { ...options, headers: { Host: "internal" } }))
      assert.strictEqual(host._tag === "FetchRefused" && host.reason, "header_not_allowed")
      const file = yield* Effect.flip(NetGuard.safeFetch("file:///etc/passwd", options))
      assert.strictEqual(file._tag === "FetchRefused" && file.reason, "scheme_not_allowed")
      const creds = yield* Effect.flip(NetGuard.safeFetch(`http://u:p@127.0.0.1:${c.port}/`, options))
      assert.strictEqual(creds._tag === "FetchRefused" && creds.reason, "invalid_url")
      assert.strictEqual(socketsCreated, sockets)
      assert.strictEqual(c.connections(), 0)
    })
  )
})

describe("NetGuard.safeFetch ends what it started", () => {
  /** Accepts the connection and never answers. */
  const silent = serve(["127.0.0.1"], () => {})
  const closedSoon = (s: Listener) =>
    Effect.sync(() => s.closed()).pipe(
      Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (n) => n === 1 }),
      Effect.timeout("3 seconds"),
      Effect.andThen(() => s.closed())
    )

  it.scopedLive("the time limit fails with timeout and closes the connection", () =>
    Effect.gen(function* () {
      const s = yield* silent
      const error = yield* Effect.flip(
        NetGuard.safeFetch(`http://127.0.0.1:${s.port}/`, {
          allowHosts: ["127.0.0.1"],
          allowPrivateNetworks: true,
          timeoutMs: 300
        })
      )
      assert.strictEqual(error._tag === "FetchFailed" && error.reason, "timeout")
      assert.strictEqual(s.connections(), 1)
      assert.strictEqual(yield* closedSoon(s), 1)
    })
  )

  it.scopedLive("the caller's signal fails with aborted and closes the connection", () =>
    Effect.gen(function* () {
      const s = yield* silent
      const error = yield* Effect.flip(
        NetGuard.safeFetch(`http://127.0.0.1:${s.port}/`, {
          allowHosts: ["127.0.0.1"],
          allowPrivateNetworks: true,
          signal: AbortSignal.timeout(300)
        })
      )
      assert.strictEqual(error._tag === "FetchFailed" && error.reason, "aborted")
      assert.strictEqual(s.connections(), 1)
      assert.strictEqual(yield* closedSoon(s), 1)
    })
  )
})

describe("NetGuard.safeFetch re-checks every redirect hop", () => {
  /** A server that redirects to `?to=`. The first hop is reached as `public.example`. */
  const redirector = serve(["127.0.0.1"], (req, res) => {
    const to = new URL(req.url ?? "/", "http://x").searchParams.get("to") ?? "/"
    res.writeHead(302, { location: to })
    res.end()
  })
  const names: Record<string, ReadonlyArray<string>> = {
    "public.example": ["127.0.0.1"],
    "rebound.example": ["0.0.0.0"]
  }
  const resolver = async (host: string) => names[host] ?? []
  const via = (r: Listener, to: string) => `http://public.example:${r.port}/?to=${encodeURIComponent(to)}`

  for (const [label, to, allow, reason] of [
    ["to 127.0.0.1, not on the allowlist", (p: number) => `http://127.0.0.1:${p}/`, [], "host_not_allowed"],
    [
      "to the mapped loopback, not on the allowlist",
      (p: number) => `http://[::ffff:7f00:1]:${p}/`,
      [],
      "host_not_allowed"
    ],
    [
      "to an allowed name that resolves to 0.0.0.0",
      (p: number) => `http://rebound.example:${p}/`,
      ["rebound.example"],
      "special_address"
    ],
    ["to an allowed [::]", (p: number) => `http://[::]:${p}/`, ["::"], "special_address"],
    ["to file:", () => "file:///etc/passwd", [], "scheme_not_allowed"]
  ] as const) {
    it.scopedLive(`a redirect ${label} is refused; the target sees no connection`, () =>
      Effect.gen(function* () {
        const c = yield* canary
        const r = yield* redirector
        const error = yield* Effect.flip(
          NetGuard.safeFetch(via(r, to(c.port)), {
            allowHosts: ["public.example", ...allow],
            allowPrivateNetworks: true,
            resolver
          })
        )
        assert.strictEqual(error._tag === "FetchRefused" && error.reason, reason, error.message)
        assert.strictEqual(r.connections(), 1)
        assert.strictEqual(c.connections(), 0)
      })
    )
  }

  it.scopedLive("an allowed redirect is followed; credentials do not cross to another origin", () =>
    Effect.gen(function* () {
      const c = yield* canary
      const r = yield* redirector
      const response = yield* NetGuard.safeFetch(via(r, `http://public.example:${c.port}/landed`), {
        allowHosts: ["public.example"],
        allowPrivateNetworks: true,
        resolver,
        headers: { authorization: "Bearer secret", "x-trace": "1" }
      })
      assert.strictEqual(text(response.body), "pong")
      assert.strictEqual(response.url, `http://public.example:${c.port}/landed`)
      assert.strictEqual(c.connections(), 1)
      assert.strictEqual(c.lastHeaders()?.["x-trace"], "1")
      assert.isUndefined(c.lastHeaders()?.authorization)
      assert.strictEqual(c.lastHeaders()?.host, `public.example:${c.port}`)
    })
  )

  it.scopedLive("a redirect loop stops at too_many_redirects", () =>
    Effect.gen(function* () {
      const loop = yield* serve(["127.0.0.1"], (_req, res) => {
        res.writeHead(307, { location: "/again" })
        res.end()
      })
      const error = yield* Effect.flip(
        NetGuard.safeFetch(`http://127.0.0.1:${loop.port}/`, { allowHosts: ["127.0.0.1"], allowPrivateNetworks: true })
      )
      assert.strictEqual(error._tag === "FetchRefused" && error.reason, "too_many_redirects")
    })
  )
})

// ---------------------------------------------------------------------------------------------
// Classification against the IANA special-purpose address registries (both families).
// ---------------------------------------------------------------------------------------------

const ianaV4 = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.0.0.0/29",
  "192.0.0.8/32",
  "192.0.0.9/32",
  "192.0.0.10/32",
  "192.0.0.170/31",
  "192.0.2.0/24",
  "192.31.196.0/24",
  "192.52.193.0/24",
  "192.88.99.0/24",
  "192.168.0.0/16",
  "192.175.48.0/24",
  "198.18.0.0/15",
  "198.51.100.0/24",
  "203.0.113.0/24",
  "224.0.0.0/4",
  "240.0.0.0/4",
  "255.255.255.255/32"
]
const ianaV6 = [
  "::/128",
  "::1/128",
  "::/96",
  "::ffff:0:0/96",
  "64:ff9b::/96",
  "64:ff9b:1::/48",
  "100::/64",
  "100:0:0:1::/64",
  "2001::/23",
  "2001::/32",
  "2001:1::1/128",
  "2001:1::2/128",
  "2001:1::3/128",
  "2001:2::/48",
  "2001:3::/32",
  "2001:4:112::/48",
  "2001:10::/28",
  "2001:20::/28",
  "2001:30::/28",
  "2001:db8::/32",
  "2002::/16",
  "2620:4f:8000::/48",
  "3fff::/20",
  "5f00::/16",
  "fc00::/7",
  "fe80::/10",
  "fec0::/10",
  "ff00::/8"
]
const edges = (cidr: string): Array<string> => {
  const [ip, bits] = ipaddr.parseCIDR(cidr)
  const first =
    ip.kind() === "ipv4" ? ipaddr.IPv4.networkAddressFromCIDR(cidr) : ipaddr.IPv6.networkAddressFromCIDR(cidr)
  const last =
    ip.kind() === "ipv4" ? ipaddr.IPv4.broadcastAddressFromCIDR(cidr) : ipaddr.IPv6.broadcastAddressFromCIDR(cidr)
  return bits === (ip.kind() === "ipv4" ? 32 : 128) ? [first.toString()] : [first.toString(), last.toString()]
}

describe("NetGuard.classifyAddress", () => {
  it("no address of an IANA special-purpose block is public (first and last of each)", () => {
    for (const cidr of [...ianaV4, ...ianaV6]) {
      for (const address of edges(cidr)) {
        assert.notStrictEqual(NetGuard.classifyAddress(address).kind, "public", `${address} (${cidr})`)
      }
    }
  })

  it("private, special and public, with embedded IPv4 judged by what it embeds", () => {
    const expect = {
      private: ["10.1.2.3", "172.20.0.1", "192.168.0.1", "127.0.0.1", "169.254.169.254", "100.64.0.1", "::1"],
      private6: ["fd00::1", "fe80::1", "fe80::1%eth0", "::ffff:10.0.0.1", "::ffff:7f00:1"],
      special: [
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "::",
        "ff02::1",
        "64:ff9b::a00:1",
        "2002:7f00:1::",
        "::7f00:1"
      ],
      special2: ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "3fff::1", "2606:4700::1111%eth0"],
      invalid: ["2130706433", "0177.0.0.1", "127.1", "0x7f000001", "localhost", "", "1.2.3.4.5", "[::1]"],
      public: ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700::1111", "2a00:1450:4001::200e"],
      public2: ["::ffff:8.8.8.8", "64:ff9b::808:808"]
    }
    for (const a of [...expect.private, ...expect.private6])
      assert.strictEqual(NetGuard.classifyAddress(a).kind, "private", a)
    for (const a of [...expect.special, ...expect.special2, ...expect.invalid])
      assert.strictEqual(NetGuard.classifyAddress(a).kind, "special", a)
    for (const a of [...expect.public, ...expect.public2])
      assert.strictEqual(NetGuard.classifyAddress(a).kind, "public", a)
  })

  it("the allowlist matches names exactly or as strict subdomains, and IP literals by value", () => {
    assert.isTrue(NetGuard.hostAllowed(["example.com"], "EXAMPLE.com"))
    assert.isFalse(NetGuard.hostAllowed(["example.com"], "api.example.com"))
    assert.isTrue(NetGuard.hostAllowed(["*.example.com"], "api.example.com"))
    assert.isFalse(NetGuard.hostAllowed(["*.example.com"], "example.com"))
    assert.isFalse(NetGuard.hostAllowed(["*.example.com"], "evilexample.com"))
    assert.isTrue(NetGuard.hostAllowed(["::ffff:127.0.0.1"], "[::ffff:7f00:1]"))
    assert.isFalse(NetGuard.hostAllowed(["127.0.0.1"], "::ffff:7f00:1"))
    assert.isFalse(NetGuard.hostAllowed(["*.0.0.1"], "127.0.0.1"))
    assert.isFalse(NetGuard.hostAllowed([], "example.com"))
  })
})

import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import { Tool } from "../src/index.js"
import { BuiltinTools } from "../src/tools.js"

const root = mkdtempSync(join(tmpdir(), "palyra-ws-"))
const outside = mkdtempSync(join(tmpdir(), "palyra-outside-"))
writeFileSync(join(root, "hello.txt"), "hello world")
mkdirSync(join(root, "sub"))
writeFileSync(join(root, "sub", "inner.txt"), "inner")
writeFileSync(join(outside, "secret.txt"), "TOP SECRET")
symlinkSync(outside, join(root, "escape")) // a directory link pointing out
symlinkSync(join(outside, "secret.txt"), join(root, "secret-link.txt")) // a file link pointing out
symlinkSync(join(root, "hello.txt"), join(root, "ok-link.txt")) // a link that stays inside

const tools = BuiltinTools.all({
  workspace: root,
  maxFileBytes: 1024,
  shell: { timeoutMs: 2_000 },
  http: { allowHosts: [] }
})
const runtime = Tool.makeRuntime(tools)
const context = {
  sessionId: "01KA0000000000000000000SES" as never,
  runId: "01KA0000000000000000000RUN" as never,
  toolCallId: "01KA00000000000000000000TC" as never,
  principal: "test",
  note: () => Effect.void
}
const run = (name: string, args: unknown, rt = runtime) => {
  const tool = rt.get(name)
  if (tool._tag === "None") throw new Error(`no tool ${name}`)
  return rt.execute(tool.value, args, context)
}
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("fs tools are confined to the workspace", () => {
  it.live("reads, lists and writes inside the workspace", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* run("fs.read", { path: "hello.txt" })).output, "hello world")
      assert.strictEqual((yield* run("fs.read", { path: "sub/../hello.txt" })).output, "hello world")
      assert.strictEqual((yield* run("fs.read", { path: "ok-link.txt" })).output, "hello world")
      const listing = JSON.parse((yield* run("fs.list", { path: "." })).output) as Array<{ name: string }>
      assert.includeMembers(
        listing.map((e) => e.name),
        ["hello.txt", "sub"]
      )
      yield* run("fs.write", { path: "new/deep/file.txt", content: "made" })
      assert.strictEqual(readFileSync(join(root, "new/deep/file.txt"), "utf8"), "made")
    })
  )

  for (const [name, args] of [
    ["fs.read", { path: "../" + outside.split("/").at(-1) + "/secret.txt" }],
    ["fs.read", { path: join(outside, "secret.txt") }],
    ["fs.read", { path: "/etc/passwd" }],
    ["fs.read", { path: "sub/../../etc/passwd" }],
    ["fs.read", { path: "escape/secret.txt" }],
    ["fs.read", { path: "secret-link.txt" }],
    ["fs.list", { path: "escape" }],
    ["fs.list", { path: ".." }],
    ["fs.write", { path: "escape/planted.txt", content: "x" }],
    ["fs.write", { path: "../planted.txt", content: "x" }],
    ["fs.write", { path: "secret-link.txt", content: "overwrite the target" }],
    ["fs.read", { path: "hello.txt\u0000.png" }]
  ] as const) {
    it.live(`refuses ${name} ${JSON.stringify(args)}`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(run(name, args))
        assert.strictEqual(error.reason, "refused")
        assert.strictEqual(readFileSync(join(outside, "secret.txt"), "utf8"), "TOP SECRET")
      })
    )
  }

  it.live("enforces size limits", () =>
    Effect.gen(function* () {
      writeFileSync(join(root, "big.txt"), "x".repeat(5000))
      assert.strictEqual((yield* Effect.flip(run("fs.read", { path: "big.txt" }))).reason, "output_too_large")
      assert.strictEqual(
        (yield* Effect.flip(run("fs.write", { path: "big2.txt", content: "y".repeat(5000) }))).reason,
        "refused"
      )
    })
  )
})

describe("shell.exec", () => {
  it.live("runs argv without a shell, with a scrubbed environment", () =>
    Effect.gen(function* () {
      const out = JSON.parse((yield* run("shell.exec", { argv: ["echo", "$HOME", "a;b"] })).output)
      assert.strictEqual(out.stdout, "$HOME a;b\n") // no expansion, no command separator
      assert.strictEqual(out.exitCode, 0)
      process.env.PALYRA_TEST_SECRET = "leak-me"
      const env = JSON.parse((yield* run("shell.exec", { argv: ["env"] })).output)
      assert.notInclude(env.stdout, "leak-me")
      const cwd = yield* Effect.flip(run("shell.exec", { argv: ["pwd"], cwd: "../" }))
      assert.strictEqual(cwd.reason, "refused")
    })
  )

  const spawnGrandchild = ["sh", "-c", "sleep 60 & echo $!; wait"]

  it.live("a timeout kills the whole process group (no orphan left)", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(run("shell.exec", { argv: spawnGrandchild, timeoutMs: 400 }))
      assert.strictEqual(error.reason, "timeout")
      const pid = Number(/output so far: (\d+)/.exec(error.message)?.[1])
      assert.isTrue(pid > 0)
      yield* Effect.sync(() => alive(pid)).pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (a) => !a }),
        Effect.timeout("3 seconds"),
        Effect.ignore
      )
      assert.isFalse(alive(pid))
    })
  )

  it.live("cancellation kills the whole process group", () =>
    Effect.gen(function* () {
      const pidFile = join(root, "grandchild.pid")
      const fiber = yield* Effect.fork(
        run("shell.exec", { argv: ["sh", "-c", `sleep 60 & echo $! > ${pidFile}; wait`], timeoutMs: 60_000 })
      )
      const pid = yield* Effect.try(() => Number(readFileSync(pidFile, "utf8"))).pipe(
        Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.intersect(Schedule.recurs(200))))
      )
      assert.isTrue(alive(pid))
      yield* Fiber.interrupt(fiber)
      yield* Effect.sync(() => alive(pid)).pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (a) => !a }),
        Effect.timeout("3 seconds"),
        Effect.ignore
      )
      assert.isFalse(alive(pid))
    })
  )

  it.live("caps output", () =>
    Effect.gen(function* () {
      const small = Tool.makeRuntime([BuiltinTools.shellTool({ root, maxOutputBytes: 100 })])
      const out = JSON.parse((yield* run("shell.exec", { argv: ["seq", "1", "10000"] }, small)).output)
      assert.isTrue(out.truncated)
      assert.isAtMost(out.stdout.length, 100)
    })
  )
})

describe("http.fetch", () => {
  const withServer = <A, E>(f: (url: string, connections: () => number) => Effect.Effect<A, E>) =>
    Effect.acquireUseRelease(
      Effect.promise(
        () =>
          new Promise<{ server: ReturnType<typeof createServer>; count: { n: number } }>((resolve) => {
            const count = { n: 0 }
            const server = createServer((req, res) => {
              if (req.url === "/redirect") {
                res.writeHead(302, { location: "http://example.invalid/x" })
                return res.end()
              }
              res.writeHead(200, { "content-type": "text/plain" })
              res.end("pong")
            })
            server.on("connection", () => count.n++)
            server.listen(0, "127.0.0.1", () => resolve({ server, count }))
          })
      ),
      ({ server, count }) => f(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, () => count.n),
      ({ server }) =>
        Effect.promise(
          () =>
            new Promise<void>((r) => {
              server.closeAllConnections()
              server.close(() => r())
            })
        )
    )

  it.live("a host not on the allowlist is refused without any connection", () =>
    withServer((url, connections) =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(run("http.fetch", { url: `${url}/ping` }))
        assert.strictEqual(error.reason, "refused")
        assert.match(error.message, /not on the allowlist/)
        assert.strictEqual(connections(), 0)
      })
    )
  )

  it.live("an allowed host that is a private/loopback address is refused unless allowed", () =>
    withServer((url, connections) =>
      Effect.gen(function* () {
        const strict = Tool.makeRuntime([BuiltinTools.httpTool({ allowHosts: ["127.0.0.1"] })])
        const error = yield* Effect.flip(run("http.fetch", { url: `${url}/ping` }, strict))
        assert.match(error.message, /private address/)
        assert.strictEqual(connections(), 0)
        const open = Tool.makeRuntime([
          BuiltinTools.httpTool({ allowHosts: ["127.0.0.1"], allowPrivateNetworks: true })
        ])
        const ok = JSON.parse((yield* run("http.fetch", { url: `${url}/ping` }, open)).output)
        assert.strictEqual(ok.body, "pong")
        assert.strictEqual(connections(), 1)
        const redirected = yield* Effect.flip(run("http.fetch", { url: `${url}/redirect` }, open))
        assert.match(redirected.message, /example.invalid is not on the allowlist/)
      })
    )
  )

  it("classifies private addresses", () => {
    for (const ip of [
      "127.0.0.1",
      "10.1.2.3",
      "192.168.0.1",
      "172.20.0.1",
      "169.254.169.254",
      "::1",
      "fd00::1",
      "::ffff:10.0.0.1"
    ]) {
      assert.isTrue(BuiltinTools.isPrivateAddress(ip), ip)
    }
    for (const ip of ["8.8.8.8", "1.1.1.1", "2606:4700::1111"]) assert.isFalse(BuiltinTools.isPrivateAddress(ip), ip)
  })
})

/**
 * `Fetch.make`'s answer body (`internal/webBody.ts`) against a real server on 127.0.0.1: the chunks
 * of one socket read are enqueued as one (fewer passes through a provider's stream stages), with the
 * same bytes in the same order; a chunk that arrives alone is delivered at once; a slow reader holds
 * the server back and still reads every byte; a cancel closes the connection; a dropped connection
 * fails the read.
 */
import { createServer, type ServerResponse } from "node:http"
import { Readable } from "node:stream"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Fetch from "../src/adapters/ai-sdk/Fetch.js"
import { webBody } from "../src/adapters/ai-sdk/internal/webBody.js"
import { closeServer, listenLocal } from "./helpers.js"

const frame = (i: number) => `data: {"i":${i},"text":"${"x".repeat(i * 7)}"}\n\n`
const burst = Array.from({ length: 6 }, (_, i) => frame(i))

// The next step of the paced answer, released by the client once it has read the previous one.
let released: (() => void) | undefined
const nextRelease = () => new Promise<void>((resolve) => (released = resolve))
let closedEarly: Promise<boolean> = Promise.resolve(false)
let sawBackpressure = false
const big = Buffer.alloc(4 * 1024 * 1024, "abcdefgh")

let base = ""
const server = createServer((req, res: ServerResponse) => {
  req.resume()
  req.on("end", async () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    if (req.url === "/burst") {
      // Six HTTP chunks written in one go: the client (on this thread) reads them after this turn,
      // all in the socket at once.
      for (const f of burst) res.write(f)
      res.end()
    } else if (req.url === "/paced") {
      for (const f of burst) {
        const next = nextRelease()
        res.write(f)
        await next
      }
      res.end()
    } else if (req.url === "/big") {
      for (let at = 0; at < big.length; at += 64 * 1024)
        if (!res.write(big.subarray(at, at + 64 * 1024))) {
          sawBackpressure = true
          await new Promise((r) => res.once("drain", r))
        }
      res.end()
    } else if (req.url === "/endless") {
      closedEarly = new Promise((resolve) => res.on("close", () => resolve(!res.writableFinished)))
      res.write(frame(1))
    } else if (req.url === "/drop") {
      res.write(frame(1))
      setTimeout(() => res.socket?.destroy(), 20)
    }
  })
})

beforeAll(async () => {
  base = await listenLocal(server)
})
afterAll(() => closeServer(server))

const fetch = Fetch.make({})!
const reads = async (path: string, each?: (chunk: Uint8Array) => Promise<void> | void) => {
  const response = await fetch(`${base}${path}`, { method: "POST", body: "{}" })
  const reader = response.body!.getReader()
  const chunks: Array<Uint8Array> = []
  while (true) {
    const next = await reader.read()
    if (next.done) return chunks
    chunks.push(next.value)
    await each?.(next.value)
  }
}
const text = (chunks: ReadonlyArray<Uint8Array>) => Buffer.concat(chunks).toString("utf8")

describe("Fetch.make's answer body", () => {
  it("enqueues the chunks of one socket read as one, with the same bytes in the same order", async () => {
    const chunks = await reads("/burst")
    assert.strictEqual(text(chunks), burst.join(""))
    // `Readable.toWeb` gives one read per HTTP chunk (six); joined, far fewer (usually one).
    assert.isBelow(chunks.length, burst.length)
  })

  it("delivers a chunk that arrives alone at once (nothing is held for more)", async () => {
    let seen = ""
    const chunks = await reads("/paced", (chunk) => {
      seen += Buffer.from(chunk).toString("utf8")
      // The server writes the next frame only once this one was read: a held chunk would hang here.
      released?.()
    })
    assert.strictEqual(seen, burst.join(""))
    assert.strictEqual(chunks.length, burst.length)
  })

  it("a slow reader holds the server back and reads every byte", async () => {
    sawBackpressure = false
    const chunks = await reads("/big", () => new Promise((r) => setTimeout(r, 1)))
    assert.isTrue(Buffer.concat(chunks).equals(big))
    assert.isTrue(sawBackpressure)
  })

  it("a cancel closes the connection before the answer's end", async () => {
    const response = await fetch(`${base}/endless`, { method: "POST", body: "{}" })
    const reader = response.body!.getReader()
    assert.strictEqual(Buffer.from((await reader.read()).value!).toString("utf8"), frame(1))
    await reader.cancel()
    assert.isTrue(await closedEarly)
  })

  it("a source that pushes synchronously is read only as far as the queue's bound (not to its end)", async () => {
    // 8 MB, and every `_read` pushes at once: flowing, Node's loop never yields to a microtask.
    let produced = 0
    const source = new Readable({
      highWaterMark: 16 * 1024,
      read() {
        produced += 1024
        this.push(produced > 8 * 1024 * 1024 ? null : Buffer.alloc(1024, 0x61))
      }
    })
    const reader = webBody(source).getReader()
    const first = await reader.read()
    assert.isFalse(first.done)
    assert.isAtMost(first.value!.byteLength, 16 * 1024)
    assert.isAtMost(produced, 8 * 16 * 1024)
    await reader.cancel()
    assert.isTrue(source.destroyed)
  })

  it("a connection dropped mid-body fails the read", async () => {
    const outcome = await reads("/drop").then(
      () => "ended",
      () => "failed"
    )
    assert.strictEqual(outcome, "failed")
  })
})

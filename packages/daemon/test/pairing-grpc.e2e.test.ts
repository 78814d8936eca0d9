/**
 * `palyra.v1.PairingService` against a real palyrad over connect-es's gRPC client: with a signed
 * webhook channel configured, the operator mints a code, a sender pairs with it over the signed
 * webhook, and the operator lists, revokes and unpairs; a non-operator token is PERMISSION_DENIED on
 * every call; a palyrad without channels answers FAILED_PRECONDITION with the documented "not configured" error.
 */
import { createHmac } from "node:crypto"
import { writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"
import { GrpcTransport } from "@palyra/transport-grpc"
import { afterEach, describe, expect, it } from "vitest"
import { fresh, startDaemon, stopDaemons } from "./support.js"

afterEach(stopDaemons)

const SECRET = "0123456789abcdef0123456789abcdef-hooks"
const ALICE_TOKEN = "alice-token-0123456789abcdefghij"

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })

/** gRPC status codes (connect-es's `Code`: this package reaches connect-es only through the transport). */
const Code = { NotFound: 5, PermissionDenied: 7, FailedPrecondition: 9 } as const

/** A call's gRPC status (a ConnectError's `code` and `rawMessage`), or undefined when it succeeded. */
const failure = async (p: Promise<unknown>) => {
  try {
    await p
    return undefined
  } catch (e) {
    const error = e as { readonly code: number; readonly rawMessage: string }
    return { code: error.code, message: error.rawMessage }
  }
}

/** One signed message to the webhook channel, as the connector documents it. */
const send = (port: number, sender: string, text: string, id: string) => {
  const body = JSON.stringify({
    account: "acme",
    conversation: `dm-${sender}`,
    sender: { id: sender, verified: true },
    platformMessageId: id,
    text,
    attachments: [],
    isDirect: true,
    mentions: [],
    receivedAt: Date.now()
  })
  const timestamp = String(Math.floor(Date.now() / 1000))
  const signature = `v1=${createHmac("sha256", SECRET).update(`${timestamp}.${body}`).digest("hex")}`
  return fetch(`http://127.0.0.1:${port}/inbound`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-palyra-timestamp": timestamp, "x-palyra-signature": signature },
    body
  })
}

const poll = async <A>(read: () => Promise<A>, until: (a: A) => boolean): Promise<A> => {
  for (let i = 0; i < 200; i++) {
    const value = await read()
    if (until(value)) return value
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error("condition not reached")
}

describe("PairingService over gRPC", () => {
  it("mint, list, pair over the webhook, list identities, unpair, revoke; operator-only", async () => {
    const dir = fresh("palyra-pairing-grpc-")
    const port = await freePort()
    writeFileSync(
      join(dir, "palyra.toml"),
      `[[channels]]\nkind = "webhook"\nname = "hooks"\nsigning_secret = "${SECRET}"\nlisten_port = ${port}\n\n` +
        `[[auth.tokens]]\ntoken = "${ALICE_TOKEN}"\nprincipal = "alice"\n`
    )
    const d = await startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
    const operator = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: d.token }).pairing
    const alice = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: ALICE_TOKEN }).pairing

    const minted = await operator.mintPairingCode({ channel: "hooks", principal: "bob", ttlSeconds: 600 })
    expect(minted.code).toMatch(/^[0-9A-HJKMNP-TV-Z]{8}$/)
    expect(minted.info).toMatchObject({ channel: "hooks", principal: "bob", createdBy: "operator", status: "active" })
    expect(Number(minted.info!.expiresAt - minted.info!.createdAt)).toBe(600_000)
    const spare = await operator.mintPairingCode({ channel: "hooks", principal: "carol" })
    const listed = await operator.listPairingCodes({ channel: "hooks" })
    expect(listed.codes.map((c) => c.id).sort()).toEqual([minted.info!.id, spare.info!.id].sort())
    expect(JSON.stringify(listed, (_, v) => (typeof v === "bigint" ? String(v) : v))).not.toContain(minted.code)
    // An unknown channel is refused by core.
    expect((await failure(operator.mintPairingCode({ channel: "nope", principal: "bob" })))?.code).toBe(Code.NotFound)

    // Not an operator: every call is refused, nothing is minted.
    for (const call of [
      alice.mintPairingCode({ channel: "hooks", principal: "alice" }),
      alice.listPairingCodes({}),
      alice.revokePairingCode({ codeOrId: spare.info!.id }),
      alice.listPairedIdentities({}),
      alice.unpair({ identityId: "x" })
    ]) {
      expect((await failure(call))?.code).toBe(Code.PermissionDenied)
    }
    expect((await operator.listPairingCodes({})).codes).toHaveLength(2)

    // The sender pairs with the code over the signed webhook.
    expect((await send(port, "u-bob", minted.code, "m1")).status).toBe(202)
    const { identities } = await poll(
      () => operator.listPairedIdentities({ principal: "bob" }),
      (r) => r.identities.length === 1
    )
    expect(identities[0]).toMatchObject({
      channel: "hooks",
      account: "acme",
      senderId: "u-bob",
      principal: "bob",
      createdBy: "pairing-code",
      active: true,
      revokedAt: 0n
    })
    const codes = (await operator.listPairingCodes({})).codes
    expect(codes.find((c) => c.id === minted.info!.id)?.status).toBe("used")

    const unpaired = await operator.unpair({ identityId: identities[0]!.id })
    expect(unpaired.identity).toMatchObject({ senderId: "u-bob", active: false })
    expect(unpaired.identity!.revokedAt).toBeGreaterThan(0n)
    expect((await failure(operator.unpair({ identityId: "no-such-identity" })))?.code).toBe(Code.NotFound)

    const revoked = await operator.revokePairingCode({ codeOrId: spare.info!.id })
    expect(revoked.code).toMatchObject({ id: spare.info!.id, status: "revoked" })
    // A used code is no longer an unused code to revoke.
    expect((await failure(operator.revokePairingCode({ codeOrId: minted.code })))?.code).toBe(Code.NotFound)
  }, 90_000)

  it("without [[channels]]: FAILED_PRECONDITION for an operator, PERMISSION_DENIED for anyone else", async () => {
    const dir = fresh("palyra-pairing-grpc-none-")
    writeFileSync(join(dir, "palyra.toml"), `[[auth.tokens]]\ntoken = "${ALICE_TOKEN}"\nprincipal = "alice"\n`)
    const d = await startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
    const operator = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: d.token }).pairing
    for (const call of [operator.listPairingCodes({}), operator.mintPairingCode({ channel: "x", principal: "y" })]) {
      const f = await failure(call)
      expect(f?.code).toBe(Code.FailedPrecondition)
      expect(f?.message).toMatch(/^channels are not configured: add a \[\[channels\]\] entry to palyra\.toml/)
    }
    // Whether channels exist is an operator's business: the caller is checked first, in core.
    const alice = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: ALICE_TOKEN }).pairing
    expect((await failure(alice.listPairingCodes({})))?.code).toBe(Code.PermissionDenied)
  }, 90_000)
})

/**
 * Bearer-token authentication shared by every transport: tokens map to principals, and a presented
 * token is compared in constant time against every configured one (no early exit on a match).
 *
 * @since 0.1.0
 */
import { hash, timingSafeEqual } from "node:crypto"
import type { Caller } from "../domain/Caller.js"

/** A bearer token and the principal it authenticates. @since 0.1.0 @category Models */
export interface TokenGrant {
  readonly token: string
  readonly principal: string
  /** Operators may act on every principal's sessions (resolve approvals, read any tape, verify). */
  readonly operator?: boolean | undefined
}

// One-shot `hash` (no `Hash` object per request): the same SHA-256 bytes as `createHash(…).digest()`.
const digest = (token: string): Buffer => hash("sha256", token, "buffer")

/**
 * An authenticator over `tokens`: takes an `Authorization` header value and returns the caller, or
 * a reason it was refused.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeAuthenticator = (tokens: ReadonlyArray<TokenGrant>) => {
  const grants = tokens.map((t) => ({ ...t, digest: digest(t.token) }))
  return (authorization: string | null | undefined): { readonly caller: Caller } | { readonly refused: string } => {
    const match = /^Bearer\s+(.+)$/i.exec(authorization ?? "")
    if (!match) return { refused: "missing bearer token (Authorization: Bearer …)" }
    const presented = digest(match[1]!.trim())
    let found: (typeof grants)[number] | undefined
    for (const g of grants) if (timingSafeEqual(presented, g.digest)) found ??= g
    return found
      ? { caller: { principal: found.principal, operator: found.operator ?? false } }
      : { refused: "invalid token" }
  }
}

import { Canonical } from "@palyra/core"

/**
 * The lookup digest of a session key: SHA-256 over the principal and the key as given. Sessions are
 * found by this digest, so the key itself can be stored redacted (for display) without breaking
 * lookup, and two keys that redact alike stay distinct. The JSON array keeps the two parts
 * unambiguous; the tag names the scheme should it ever change.
 * @internal
 */
export const sessionKeyDigest = (principal: string, key: string): string =>
  Canonical.sha256(JSON.stringify(["palyra/session-key/v1", principal, key]))

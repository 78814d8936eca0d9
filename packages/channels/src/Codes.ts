/**
 * Short secret codes in Crockford base32 (no I, L, O, U; case-insensitive; `I`/`L` read as `1` and
 * `O` as `0`), drawn from `crypto.randomBytes`: 8-character pairing codes (40 bits) and 6-character
 * approval codes (30 bits). Pairing codes are stored only as a SHA-256 digest.
 *
 * @since 0.1.0
 */
import { createHash, randomBytes } from "node:crypto"

/** @since 0.1.0 @category Constants */
export const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

/**
 * A uniformly random code of `length` Crockford base32 characters (5 random bits each, no modulo
 * bias: 32 divides 256).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const random = (length: number): string => {
  const bytes = randomBytes(length)
  let out = ""
  for (const b of bytes) out += ALPHABET[b & 31]
  return out
}

/** A new pairing code: 8 characters. @since 0.1.0 @category Constructors */
export const pairingCode = (): string => random(8)

/** A new approval code: 6 characters. @since 0.1.0 @category Constructors */
export const approvalCode = (): string => random(6)

/**
 * What a person typed, read as a code: upper-cased, spaces and hyphens removed, `I`/`L` as `1` and
 * `O` as `0`. None when the result is not `length` base32 characters.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const normalize = (typed: string, length: number): string | undefined => {
  const s = typed.trim().toUpperCase().replace(/[\s-]/g, "").replace(/[IL]/g, "1").replace(/O/g, "0")
  if (s.length !== length) return undefined
  for (const c of s) if (!ALPHABET.includes(c)) return undefined
  return s
}

/** The digest a pairing code is stored and looked up by. @since 0.1.0 @category Hashing */
export const digest = (code: string): string =>
  createHash("sha256").update("palyra/pairing-code/v1\u0000").update(code).digest("hex")

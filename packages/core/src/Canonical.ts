/**
 * Canonical JSON (sorted keys, no whitespace) and SHA-256 digests over it. Used for tool argument
 * digests (an approval binds to exactly one argument set) and for the journal's hash chain.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"

/** Deterministic JSON: object keys sorted, `undefined` fields dropped. @since 0.1.0 @category Encoding */
export const canonicalJson = (value: unknown): string => {
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) return "null"
    if (typeof value === "bigint") return JSON.stringify(value.toString())
    return JSON.stringify(value) ?? "null"
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`
}

/** Hex SHA-256 of a string. @since 0.1.0 @category Encoding */
export const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex")

/** Digest of a JSON value through its canonical form. @since 0.1.0 @category Encoding */
export const digest = (value: unknown): string => sha256(canonicalJson(value))

import { describe, expect, it } from "vitest"
import { Auth } from "../src/index.js"

describe("Auth.makeAuthenticator", () => {
  const authenticate = Auth.makeAuthenticator([
    { token: "tok-alice-0123456789", principal: "alice" },
    { token: "tok-ops-0123456789", principal: "ops", operator: true }
  ])

  it("maps each configured bearer token to its principal and operator flag", () => {
    expect(authenticate("Bearer tok-alice-0123456789")).toEqual({ caller: { principal: "alice", operator: false } })
    expect(authenticate("bearer   tok-ops-0123456789  ")).toEqual({ caller: { principal: "ops", operator: true } })
  })

  it("refuses a missing, malformed, unknown or near-miss token", () => {
    expect(authenticate(undefined)).toHaveProperty("refused")
    expect(authenticate("Basic dG9rLWFsaWNl")).toHaveProperty("refused")
    expect(authenticate("Bearer tok-alice-012345678")).toEqual({ refused: "invalid token" })
    expect(authenticate("Bearer tok-alice-01234567890")).toEqual({ refused: "invalid token" })
    expect(authenticate("Bearer TOK-ALICE-0123456789")).toEqual({ refused: "invalid token" })
  })
})

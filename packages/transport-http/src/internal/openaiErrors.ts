/**
 * Palyra failures in OpenAI's error shape, `{ error: { message, type, param, code } }`, with the
 * status from core's error table and Palyra's stable code as `code`.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Errors } from "@palyra/core"
import { Effect } from "effect"
import type { OpenAiErrors } from "../Api.js"

type Status = keyof typeof OpenAiErrors
type Body<S extends Status> = (typeof OpenAiErrors)[S]["Type"]

const types = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  409: "conflict_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "server_error",
  502: "upstream_error",
  503: "service_unavailable"
} as const satisfies { readonly [S in Status]: Body<S>["error"]["type"] }

const isStatus = (status: number): status is Status => status in types

/** An OpenAI-shaped error body for `status`. @internal */
export const openAiError = <S extends Status>(
  status: S,
  message: string,
  options: { readonly param?: string | undefined; readonly code?: string | undefined } = {}
): { readonly status: S; readonly body: Body<S> } => ({
  status,
  body: { error: { message, type: types[status], param: options.param ?? null, code: options.code ?? null } } as Body<S>
})

/** Any failure as an OpenAI-shaped error response; failures not for clients are logged. @internal */
export const openAiErrorResponse = (error: unknown): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const wire = Errors.toWire(error)
  const status = isStatus(wire.http) ? wire.http : 500
  const field = error instanceof Errors.InvalidArgument ? error.field : undefined
  const { body } = openAiError(status, wire.message, { param: field, code: wire.code })
  const response = HttpServerResponse.unsafeJson(body, { status })
  return wire.expose ? Effect.succeed(response) : Effect.as(Effect.logError("request failed", error), response)
}

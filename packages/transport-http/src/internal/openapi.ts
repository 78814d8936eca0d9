import { Records, TapeEvent } from "@palyra/core"
import { JSONSchema, type Schema } from "effect"

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })
const error = { description: "Error", content: { "application/json": { schema: ref("Error") } } }
const ok = (schema: unknown, description = "OK") => ({ description, content: { "application/json": { schema } } })
const sse = {
  description: "Server-sent events: one tape event per message; `id` is the tape_seq",
  content: { "text/event-stream": { schema: { type: "string" } } }
}
const common = { "400": error, "401": error, "404": error, "500": error }
const idParam = (name: string) => ({
  name,
  in: "path",
  required: true,
  schema: { type: "string", pattern: "^[0-9A-HJKMNP-TV-Z]{26}$" }
})
const jsonBody = (schema: unknown) => ({ required: true, content: { "application/json": { schema } } })

const schemaOf = <A, I>(s: Schema.Schema<A, I>) => {
  const { $schema: _, ...rest } = JSONSchema.make(s) as unknown as Record<string, unknown>
  return rest
}

/** The OpenAPI 3.1 document served at /openapi.json. @internal */
export const openApiDocument = {
  openapi: "3.1.0",
  info: {
    title: "Palyra HTTP API",
    version: "0.1.0",
    description:
      "Runs, sessions, approvals and the journal of a Palyra daemon. Every route but /healthz and /readyz needs `Authorization: Bearer <token>`."
  },
  components: {
    securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
    schemas: {
      Error: {
        type: "object",
        required: ["code", "message"],
        properties: { code: { type: "string" }, message: { type: "string" } }
      },
      TapeEvent: schemaOf(TapeEvent.TapeEvent),
      Run: schemaOf(Records.Run),
      Session: schemaOf(Records.Session),
      Approval: schemaOf(Records.ApprovalRecord)
    }
  },
  security: [{ bearer: [] }],
  paths: {
    "/healthz": { get: { security: [], summary: "Liveness", responses: { "200": ok({ type: "object" }) } } },
    "/readyz": {
      get: { security: [], summary: "Readiness", responses: { "200": ok({ type: "object" }), "503": error } }
    },
    "/v1/runs": {
      post: {
        summary: "Send a message: starts (or queues) a run. With ?stream=true the response is the run's events (SSE).",
        parameters: [{ name: "stream", in: "query", schema: { type: "boolean" } }],
        requestBody: jsonBody({
          type: "object",
          required: ["text"],
          properties: {
            text: { type: "string" },
            sessionId: { type: "string" },
            sessionKey: { type: "string" },
            channel: { type: "string" }
          }
        }),
        responses: { "202": ok({ type: "object" }, "Accepted"), "200": sse, "413": error, ...common }
      }
    },
    "/v1/runs/{id}": {
      get: { summary: "A run", parameters: [idParam("id")], responses: { "200": ok(ref("Run")), ...common } }
    },
    "/v1/runs/{id}/cancel": {
      post: { summary: "Cancel a run", parameters: [idParam("id")], responses: { "200": ok(ref("Run")), ...common } }
    },
    "/v1/sessions": {
      get: { summary: "List sessions", responses: { "200": ok({ type: "array", items: ref("Session") }), ...common } },
      post: {
        summary: "Create a session, or reuse the one with this key",
        requestBody: jsonBody({
          type: "object",
          properties: { sessionKey: { type: "string" }, title: { type: "string" } }
        }),
        responses: { "201": ok(ref("Session")), ...common }
      }
    },
    "/v1/sessions/{id}": {
      get: { summary: "A session", parameters: [idParam("id")], responses: { "200": ok(ref("Session")), ...common } }
    },
    "/v1/sessions/{id}/reset": {
      post: {
        summary: "Start a fresh history",
        parameters: [idParam("id")],
        responses: { "200": ok(ref("Session")), ...common }
      }
    },
    "/v1/sessions/{id}/branch": {
      post: {
        summary: "Branch a session at a tape_seq",
        parameters: [idParam("id")],
        requestBody: jsonBody({
          type: "object",
          properties: { atSeq: { type: "integer" }, title: { type: "string" } }
        }),
        responses: { "201": ok(ref("Session")), ...common }
      }
    },
    "/v1/sessions/{id}/tape": {
      get: {
        summary: "Read the tape after a tape_seq",
        parameters: [
          idParam("id"),
          { name: "after", in: "query", schema: { type: "integer" } },
          { name: "limit", in: "query", schema: { type: "integer" } }
        ],
        responses: { "200": ok({ type: "array", items: ref("TapeEvent") }), ...common }
      }
    },
    "/v1/sessions/{id}/events": {
      get: {
        summary: "Follow the tape (SSE): replay after Last-Event-ID (or ?after=), then live",
        parameters: [idParam("id"), { name: "Last-Event-ID", in: "header", schema: { type: "integer" } }],
        responses: { "200": sse, ...common }
      }
    },
    "/v1/approvals": {
      get: {
        summary: "List approvals",
        parameters: [
          { name: "status", in: "query", schema: { enum: ["pending", "approved", "denied", "expired"] } },
          { name: "sessionId", in: "query", schema: { type: "string" } },
          { name: "runId", in: "query", schema: { type: "string" } }
        ],
        responses: { "200": ok({ type: "array", items: ref("Approval") }), ...common }
      }
    },
    "/v1/approvals/{id}": {
      get: {
        summary: "An approval",
        parameters: [idParam("id")],
        responses: { "200": ok(ref("Approval")), ...common }
      },
      post: {
        summary: "Approve or deny",
        parameters: [idParam("id")],
        requestBody: jsonBody({
          type: "object",
          required: ["decision"],
          properties: {
            decision: { enum: ["approve", "deny"] },
            scope: { enum: ["once", "session", "always"] },
            reason: { type: "string" }
          }
        }),
        responses: { "200": ok(ref("Approval")), "409": error, ...common }
      }
    },
    "/v1/grants": {
      get: {
        summary: "Standing grants (session/always approvals), each with the Cedar policy it amounts to",
        responses: { "200": ok({ type: "array", items: ref("Approval") }), ...common }
      }
    },
    "/v1/grants/{id}/revoke": {
      post: {
        summary: "Revoke a standing grant",
        parameters: [idParam("id")],
        responses: { "200": ok(ref("Approval")), "409": error, ...common }
      }
    },
    "/v1/journal/verify": {
      get: {
        summary: "Recompute the journal's hash chain (operator)",
        responses: { "200": ok({ type: "object" }), "403": error, ...common }
      }
    }
  }
} as const

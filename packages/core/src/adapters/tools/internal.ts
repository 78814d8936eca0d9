import { ToolError } from "../../domain/Errors.js"

/** @internal */
export const refused = (tool: string, message: string) => new ToolError({ tool, reason: "refused", message })
/** @internal */
export const failed = (tool: string) => (cause: unknown) =>
  new ToolError({ tool, reason: "failed", message: cause instanceof Error ? cause.message : String(cause), cause })

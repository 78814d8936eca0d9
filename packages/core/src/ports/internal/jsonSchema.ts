/**
 * Tool parameters given as JSON Schema, compiled once per tool by Ajv (draft 2020-12 by default,
 * draft-07 when the schema says so) with `ajv-formats`.
 *
 * - Strict schemas: an unknown keyword, an unknown `format` or a `$ref` that does not resolve is
 *   an error when the tool is defined, so nothing a schema author meant to check is silently
 *   skipped. Type-applicability and tuple warnings are off (they would only log).
 * - All errors are collected, so the model reads every path it got wrong at once.
 * - Data is never changed (no defaults, no coercion, no removal).
 * - Ajv is loaded on the first JSON-Schema tool definition, not when `@palyra/core` is imported:
 *   it adds about 20 ms to an import that does not always need it.
 *
 * @internal
 */
import { createRequire } from "node:module"
import type { Ajv, ErrorObject, Options } from "ajv"
import type { FormatsPlugin } from "ajv-formats"

type Constructor = new (options: Options) => Ajv

const options: Options = {
  strict: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  allErrors: true,
  addUsedSchema: false,
  logger: false
}

const draft2020 = new Set([
  "https://json-schema.org/draft/2020-12/schema",
  "https://json-schema.org/draft/2020-12/schema#"
])
const draft07 = new Set(["http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-07/schema#"])

const instances = new Map<string, Ajv>()
const instance = (draft: "2020-12" | "draft-07"): Ajv => {
  const cached = instances.get(draft)
  if (cached) return cached
  const require = createRequire(import.meta.url)
  const Class = (require(draft === "2020-12" ? "ajv/dist/2020.js" : "ajv") as { default: Constructor }).default
  const addFormats = (require("ajv-formats") as { default: FormatsPlugin }).default
  const ajv = new Class(options)
  addFormats(ajv)
  instances.set(draft, ajv)
  return ajv
}

const maxListed = 20

const describe = (e: ErrorObject): string => {
  const at = e.instancePath === "" ? "/" : e.instancePath
  const child = (name: unknown) => `${e.instancePath}/${String(name).replaceAll("~", "~0").replaceAll("/", "~1")}`
  switch (e.keyword) {
    case "required":
      return `${child(e.params.missingProperty)}: is required`
    case "additionalProperties":
      return `${child(e.params.additionalProperty)}: is not allowed`
    case "unevaluatedProperties":
      return `${child(e.params.unevaluatedProperty)}: is not allowed`
    case "enum":
      return `${at}: must be one of ${JSON.stringify(e.params.allowedValues)}`
    case "const":
      return `${at}: must be ${JSON.stringify(e.params.allowedValue)}`
    default:
      return `${at}: ${e.message ?? e.keyword}`
  }
}

/**
 * Compile `schema`; the result lists what is wrong with a value, one line per error with its
 * JSON-Pointer path (empty when the value is valid). Throws when the schema itself is invalid.
 *
 * @internal
 */
export const compile = (schema: Record<string, unknown>): ((value: unknown) => ReadonlyArray<string>) => {
  const declared = schema.$schema
  const draft =
    declared === undefined || draft2020.has(String(declared))
      ? "2020-12"
      : draft07.has(String(declared))
        ? "draft-07"
        : undefined
  if (draft === undefined) throw new Error(`unsupported $schema ${JSON.stringify(declared)} (use 2020-12 or draft-07)`)
  const validate = instance(draft).compile(schema)
  return (value) => {
    if (validate(value)) return []
    const errors = (validate.errors ?? []).map(describe)
    const lines = [...new Set(errors)]
    return lines.length > maxListed
      ? [...lines.slice(0, maxListed), `…and ${lines.length - maxListed} more`]
      : lines.length === 0
        ? ["/: is invalid"]
        : lines
  }
}

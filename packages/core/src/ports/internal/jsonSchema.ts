/**
 * A small JSON Schema validator for tool parameters given as JSON Schema (the subset tools use:
 * type, properties, required, additionalProperties, enum, const, items, string/number/array bounds,
 * pattern, anyOf). Unknown keywords are ignored, never treated as a pass for a known one.
 * @internal
 */
type JsonSchema = Record<string, unknown>

const typeOf = (v: unknown): string =>
  v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "number" && Number.isInteger(v) ? "integer" : typeof v

const matchesType = (t: string, v: unknown): boolean => {
  const actual = typeOf(v)
  if (t === "number") return actual === "number" || actual === "integer"
  return actual === t
}

/** @internal */
export const validate = (schema: JsonSchema, value: unknown, path = "$"): Array<string> => {
  const errors: Array<string> = []
  const type = schema.type
  if (type !== undefined) {
    const types = Array.isArray(type) ? (type as Array<string>) : [type as string]
    if (!types.some((t) => matchesType(t, value))) {
      return [`${path}: expected ${types.join(" | ")}, got ${typeOf(value)}`]
    }
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    errors.push(`${path}: must be one of ${JSON.stringify(schema.enum)}`)
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    errors.push(`${path}: must be ${JSON.stringify(schema.const)}`)
  }
  if (Array.isArray(schema.anyOf)) {
    const ok = (schema.anyOf as Array<JsonSchema>).some((s) => validate(s, value, path).length === 0)
    if (!ok) errors.push(`${path}: matches none of the allowed shapes`)
  }
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && value.length < schema.minLength)
      errors.push(`${path}: shorter than ${schema.minLength}`)
    if (typeof schema.maxLength === "number" && value.length > schema.maxLength)
      errors.push(`${path}: longer than ${schema.maxLength}`)
    if (typeof schema.pattern === "string" && !new RegExp(schema.pattern, "u").test(value))
      errors.push(`${path}: does not match ${schema.pattern}`)
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) errors.push(`${path}: below ${schema.minimum}`)
    if (typeof schema.maximum === "number" && value > schema.maximum) errors.push(`${path}: above ${schema.maximum}`)
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems)
      errors.push(`${path}: fewer than ${schema.minItems} items`)
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems)
      errors.push(`${path}: more than ${schema.maxItems} items`)
    if (schema.items && typeof schema.items === "object" && !Array.isArray(schema.items)) {
      value.forEach((item, i) => {
        errors.push(...validate(schema.items as JsonSchema, item, `${path}[${i}]`))
      })
    }
  }
  if (typeOf(value) === "object") {
    const obj = value as Record<string, unknown>
    const props = (schema.properties ?? {}) as Record<string, JsonSchema>
    for (const key of (schema.required ?? []) as Array<string>) {
      if (!(key in obj)) errors.push(`${path}.${key}: is required`)
    }
    for (const [key, v] of Object.entries(obj)) {
      const sub = props[key]
      if (sub) errors.push(...validate(sub, v, `${path}.${key}`))
      else if (schema.additionalProperties === false) errors.push(`${path}.${key}: is not allowed`)
      else if (schema.additionalProperties && typeof schema.additionalProperties === "object")
        errors.push(...validate(schema.additionalProperties as JsonSchema, v, `${path}.${key}`))
    }
  }
  return errors
}

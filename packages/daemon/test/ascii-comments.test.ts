/**
 * The daemon build's `ascii-comments` step (`tsup.config.ts`) makes a chunk ASCII by rewriting
 * non-ASCII characters in comments only: code esbuild's `charset: "ascii"` leaves as written (a
 * regular-expression literal, a tagged template) must come out unchanged, and behave the same.
 */
import { expect, it } from "vitest"
import config from "../tsup.config.js"

type Render = (code: string, chunk: { readonly path: string }) => { readonly code: string } | undefined

const plugin = () => {
  const options = Array.isArray(config) ? config[0] : config
  const found = (options as { plugins?: ReadonlyArray<{ name: string; renderChunk?: unknown }> }).plugins?.find(
    (p) => p.name === "ascii-comments"
  )
  if (found?.renderChunk === undefined) throw new Error("no ascii-comments plugin in the daemon's tsup config")
  return found.renderChunk as Render
}

const evaluate = async (code: string, tag: string) => {
  await import(`data:text/javascript,${encodeURIComponent(`${code}\n// ${tag}`)}`)
  return (globalThis as { r?: unknown }).r
}

it("rewrites non-ASCII in comments only; regular expressions and tagged templates are left as written", async () => {
  const source = [
    "// a comment \u2014 with a dash and an emoji \u{1F44D}",
    "/** a block comment: 0\u20131 */",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: JavaScript source, its template evaluated by the test
    "globalThis.r = [/[\u2013\u2014]/.test('a\\u2014b'), String.raw`a\u2014b`, `x${'/* not a comment \u2014 */'}`]"
  ].join("\n")
  const rendered = plugin()(source, { path: "chunk.js" })?.code ?? source
  const comments = rendered.split("\n").slice(0, 2).join("\n")
  expect(/[\u0080-\uffff]/.test(comments)).toBe(false)
  expect(comments.length).toBe(source.split("\n").slice(0, 2).join("\n").length)
  expect(rendered.split("\n")[2]).toBe(source.split("\n")[2])
  expect(await evaluate(rendered, "after")).toEqual([true, "a\u2014b", "x/* not a comment \u2014 */"])
})

it("leaves an ASCII chunk alone", () => {
  expect(plugin()("const a = 1 // plain\n", { path: "chunk.js" })).toBeUndefined()
})

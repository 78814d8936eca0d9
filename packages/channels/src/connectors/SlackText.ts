/**
 * Slack's message markup as the plain text a model reads.
 *
 * Slack sends `<…>` for everything it links (`&lt;`, `&gt;` and `&amp;` stand for the literal
 * characters, so every `<` in the raw text opens markup):
 *
 * | markup | plain text |
 * | --- | --- |
 * | `<@UBOT>` / `<@UBOT\|name>` (the bot itself) | removed (it is the addressing), with a `:` or `,` after it |
 * | `<@U123\|ana>` / `<@U123>` | `@ana` / `@U123` |
 * | `<#C123\|general>` / `<#C123>` | `#general` / `#C123` |
 * | `<!here>` `<!channel>` `<!everyone>` | `@here` `@channel` `@everyone` (the router's broadcasts) |
 * | `<!subteam^S1\|@devs>` / `<!date^…\|fallback>` | the label (`@devs`, `fallback`) |
 * | `<https://x\|label>` / `<https://x>` | `label (https://x)` / `https://x` |
 * | `<mailto:a@b.c\|a@b.c>` | `a@b.c` |
 *
 * Spaces left by a removed mention are collapsed; line breaks are kept.
 *
 * @since 0.1.0
 */

const BROADCAST: Readonly<Record<string, string>> = { here: "@here", channel: "@channel", everyone: "@everyone" }

const unescapeSlack = (text: string) => text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&")

/** One `<…>` markup (its inside, still escaped) as plain text. */
const render = (inside: string, botUserId: string): string => {
  const bar = inside.indexOf("|")
  const target = bar === -1 ? inside : inside.slice(0, bar)
  const label = bar === -1 ? undefined : unescapeSlack(inside.slice(bar + 1))
  const named = label !== undefined && label.length > 0 ? label : undefined
  switch (target[0]) {
    case "@": {
      const id = target.slice(1)
      if (id.toUpperCase() === botUserId.toUpperCase()) return ""
      return `@${named === undefined ? id : named.replace(/^@/, "")}`
    }
    case "#":
      return `#${named === undefined ? target.slice(1) : named.replace(/^#/, "")}`
    case "!": {
      const word = target.slice(1)
      const broadcast = BROADCAST[word.toLowerCase()]
      if (broadcast !== undefined) return broadcast
      return named ?? (word.startsWith("subteam^") ? `@${word.slice("subteam^".length)}` : word)
    }
    default: {
      const url = unescapeSlack(target)
      if (named === undefined || named === url) return url
      if (url === `mailto:${named}`) return named
      return `${named} (${url})`
    }
  }
}

/**
 * Slack message text (as the Events API sends it) as plain text for the model; `botUserId` is the
 * app's own user id, whose mentions are dropped.
 *
 * @since 0.1.0
 * @category Conversion
 */
export const toPlainText = (raw: string, botUserId: string): string => {
  let out = ""
  let from = 0
  for (const m of raw.matchAll(/<([^<>]*)>/g)) {
    out += unescapeSlack(raw.slice(from, m.index))
    const rendered = render(m[1]!, botUserId)
    out += rendered
    from = m.index + m[0].length
    // "<@BOT>: hi" and "<@BOT>, hi" lose the punctuation that went with the addressing.
    if (rendered === "" && /^[,:](?=\s|$)/.test(raw.slice(from))) from++
  }
  out += unescapeSlack(raw.slice(from))
  return out
    .split("\n")
    .map((line) => line.replace(/[ \t]{2,}/g, " ").replace(/^[ \t]+(?=\S)|(?<=\S)[ \t]+$/g, ""))
    .join("\n")
    .trim()
}

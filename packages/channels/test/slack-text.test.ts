import { assert, describe, it } from "@effect/vitest"
import * as SlackText from "../src/connectors/SlackText.js"

const plain = (raw: string) => SlackText.toPlainText(raw, "U0BOT")

describe("SlackText.toPlainText", () => {
  it("drops the bot's own mention (the addressing), with or without a name, in any case", () => {
    assert.strictEqual(plain("<@U0BOT> what time is it?"), "what time is it?")
    assert.strictEqual(plain("<@U0BOT|palyra>: hi"), "hi")
    assert.strictEqual(plain("<@U0BOT>, 2:30 works"), "2:30 works")
    assert.strictEqual(plain("<@U0BOT>:tada: yes"), ":tada: yes")
    assert.strictEqual(plain("ask <@u0bot> about it"), "ask about it")
    assert.strictEqual(plain("<@U0BOT>"), "")
  })

  it("renders other users as @name when the payload names them, else @id", () => {
    assert.strictEqual(plain("<@U0BOT> tell <@U123|ana> and <@W22>"), "tell @ana and @W22")
    assert.strictEqual(plain("<@U123|@ana>"), "@ana")
    assert.strictEqual(plain("<@U123|>"), "@U123")
  })

  it("renders channels, links, e-mail links, user groups and dates", () => {
    assert.strictEqual(plain("see <#C123|general> and <#C9>"), "see #general and #C9")
    assert.strictEqual(
      plain("read <https://example.com/a?b=1&amp;c=2|the docs> or <https://x.test>"),
      "read the docs (https://example.com/a?b=1&c=2) or https://x.test"
    )
    assert.strictEqual(plain("<https://x.test|https://x.test>"), "https://x.test")
    assert.strictEqual(plain("mail <mailto:ana@example.com|ana@example.com>"), "mail ana@example.com")
    assert.strictEqual(plain("ping <!subteam^S01|@devs>"), "ping @devs")
    assert.strictEqual(plain("<!date^1392734382^{date_short}|Feb 18, 2014>"), "Feb 18, 2014")
  })

  it("maps broadcasts to the forms the router understands", () => {
    assert.strictEqual(plain("<!here> standup"), "@here standup")
    assert.strictEqual(plain("<!channel|channel> and <!everyone>"), "@channel and @everyone")
  })

  it("undoes Slack's escapes after reading markup: escaped brackets are text, never markup", () => {
    assert.strictEqual(plain("a &lt;@U123&gt; b &amp;lt; c"), "a <@U123> b &lt; c")
    assert.strictEqual(plain("<https://x.test|a &lt;b&gt;>"), "a <b> (https://x.test)")
  })

  it("collapses the spaces a removed mention leaves; keeps line breaks", () => {
    assert.strictEqual(plain("  <@U0BOT>   first line\n<@U0BOT>  second  line "), "first line\nsecond line")
  })
})

/**
 * An agent under test: a refund helper. Its tool is `sensitive`, so every refund needs a human.
 */
import { Tool } from "@palyra/core"
import { Effect, Schema } from "effect"

export const refunds: Array<{ orderId: string; cents: number }> = []

export const refundTool = Tool.make("orders.refund", {
  description: "Refund an order",
  parameters: Schema.Struct({ orderId: Schema.String, cents: Schema.Int.pipe(Schema.positive()) }),
  risk: "sensitive",
  category: "payments",
  execute: (args) =>
    Effect.sync(() => {
      refunds.push(args)
      return `refunded ${args.cents} cents on ${args.orderId}`
    })
})

export const instructions = "You help with refunds. Always confirm the amount."

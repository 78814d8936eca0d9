import type { IncomingMessage } from "node:http"

/** A request body up to `max` bytes (`"too_large"` past it: reading stops). @internal */
export const readBody = (req: IncomingMessage, max: number) =>
  new Promise<Buffer | "too_large">((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    req.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > max) {
        resolve("too_large")
        req.pause()
      } else chunks.push(chunk)
    })
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

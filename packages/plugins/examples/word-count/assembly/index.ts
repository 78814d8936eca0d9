// word-count: counts the lines, words and bytes of a workspace file, read through the host's
// `palyra_read_file` (the plugin has no file system of its own).
import { Host } from "@extism/as-pdk"
import { jsonString, output, quote, readFile } from "../../shared/palyra"

export { abort } from "../../shared/palyra"

function isSpace(c: u8): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d || c == 0x0b || c == 0x0c
}

export function count(): i32 {
  const args = Host.inputString()
  const path = jsonString(args, "path")
  if (path === null) {
    output('{"error":"missing path"}')
    return 1
  }
  const file = readFile(path)
  if (!file.ok) {
    output('{"error":' + quote(file.text()) + "}")
    return 1
  }
  const bytes = file.payload
  let lines = 0
  let words = 0
  let inWord = false
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]
    if (c == 0x0a) lines++
    if (isSpace(c)) inWord = false
    else if (!inWord) {
      inWord = true
      words++
    }
  }
  output(
    '{"path":' +
      quote(path) +
      ',"lines":' +
      lines.toString() +
      ',"words":' +
      words.toString() +
      ',"bytes":' +
      bytes.length.toString() +
      "}"
  )
  return 0
}

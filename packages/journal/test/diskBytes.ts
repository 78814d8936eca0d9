import { readFileSync } from "node:fs"

/** Every byte SQLite keeps for `filename`: the database, its WAL, its shared-memory index and any rollback journal. */
export const diskBytes = (filename: string): Buffer =>
  Buffer.concat(
    ["", "-wal", "-shm", "-journal"].map((suffix) => {
      try {
        return readFileSync(filename + suffix)
      } catch {
        return Buffer.alloc(0)
      }
    })
  )

/**
 * The secrets of which any `window`-character stretch occurs anywhere in those bytes: catches a
 * secret stored whole, and one stored in pieces (a streamed key split across two events).
 */
export const secretsOnDisk = (filename: string, secrets: ReadonlyArray<string>, window = 10): Array<string> => {
  const bytes = diskBytes(filename)
  return secrets.filter((secret) => {
    for (let i = 0; i + Math.min(window, secret.length) <= secret.length; i++) {
      if (bytes.includes(Buffer.from(secret.slice(i, i + window)))) return true
    }
    return false
  })
}

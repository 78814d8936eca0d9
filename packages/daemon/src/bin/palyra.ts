#!/usr/bin/env node
process.stderr.write(
  "palyra is not implemented yet: the daemon lands with its own issue. Run `npm test` to check the libraries.\n"
)
process.exitCode = 0

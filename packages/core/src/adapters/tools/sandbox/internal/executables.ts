import { accessSync, closeSync, constants, openSync, readSync, realpathSync, statSync } from "node:fs"
import { basename, delimiter, isAbsolute, resolve } from "node:path"

/**
 * Find a program the way `execvp` would, and return its real path (symlinks resolved), or
 * `undefined`. A name with a slash is a path (relative to `cwd`); a bare name is looked up in the
 * absolute entries of `path` only (an empty or relative PATH entry would search the working
 * directory, which a tool's caller controls).
 *
 * @internal
 */
export const resolveExecutable = (name: string, path: string, cwd: string): string | undefined => {
  if (name === "" || name.includes("\0")) return undefined
  const candidates = name.includes("/")
    ? [resolve(cwd, name)]
    : path
        .split(delimiter)
        .filter((dir) => isAbsolute(dir))
        .map((dir) => resolve(dir, name))
  for (const candidate of candidates) {
    try {
      const real = realpathSync(candidate)
      if (!statSync(real).isFile()) continue
      accessSync(real, constants.X_OK)
      return real
    } catch {
      // not here
    }
  }
  return undefined
}

/** Shells, language runtimes and launchers: programs whose job is to run other code. @internal */
export const interpreterNames: ReadonlyArray<string> = [
  // shells and multi-call binaries
  "sh",
  "bash",
  "rbash",
  "dash",
  "ash",
  "zsh",
  "ksh",
  "mksh",
  "pdksh",
  "yash",
  "posh",
  "csh",
  "tcsh",
  "fish",
  "busybox",
  "toybox",
  // language runtimes (a version suffix such as python3.11 or perl5.36.0 is ignored)
  "python",
  "pypy",
  "perl",
  "ruby",
  "irb",
  "php",
  "lua",
  "luajit",
  "tclsh",
  "wish",
  "expect",
  "node",
  "nodejs",
  "deno",
  "bun",
  "julia",
  "R",
  "Rscript",
  "guile",
  "java",
  "jshell",
  "pwsh",
  "awk",
  "gawk",
  "mawk",
  "nawk",
  // launchers: they run the program named in their arguments
  "env",
  "xargs",
  "nohup",
  "nice",
  "ionice",
  "timeout",
  "setsid",
  "stdbuf",
  "time",
  "watch",
  "flock",
  "chrt",
  "taskset",
  "script",
  "chroot",
  "unshare",
  "nsenter",
  "setpriv",
  "prlimit",
  "bwrap",
  "sudo",
  "su",
  "doas",
  "runuser",
  "strace",
  "ltrace",
  "gdb"
]

const interpreterSet = new Set(interpreterNames)

/** True when a program's file name names an interpreter or launcher (version suffixes ignored). @internal */
export const isInterpreterName = (path: string): boolean => {
  const name = basename(path)
  return interpreterSet.has(name) || interpreterSet.has(name.replace(/[0-9][0-9.]*$/, ""))
}

/**
 * The interpreter a script names on its `#!` line (for `#!/usr/bin/env X`, the program X), or
 * `undefined` for a file that is not a script. The kernel runs that interpreter, so it is what the
 * interpreter rule must judge.
 *
 * @internal
 */
export const shebangOf = (path: string): string | undefined => {
  const head = Buffer.alloc(256)
  let read = 0
  try {
    const fd = openSync(path, "r")
    try {
      read = readSync(fd, head, 0, head.length, 0)
    } finally {
      closeSync(fd)
    }
  } catch {
    return undefined
  }
  const text = head.subarray(0, read).toString("latin1")
  if (!text.startsWith("#!")) return undefined
  const words = text.slice(2).split("\n")[0]!.trim().split(/\s+/)
  const interpreter = words[0] ?? ""
  return basename(interpreter) === "env" ? (words.slice(1).find((w) => !w.startsWith("-")) ?? interpreter) : interpreter
}

/**
 * An app's `[env]` and its project's secrets: variables its replicas get on top of the environment the
 * platform builds for them. Some names are refused here, in one list, for both: the platform's own
 * variables, and every name that changes how a program starts before its own code runs. The latter
 * matter because a jailed process is started by root: `/bin/sh` (joining the replica's cgroup, when there
 * is one) → bubblewrap → `setpriv` (root with `CAP_SETUID`) → the tenant's command, and the environment
 * travels through each of them (`server/sandbox/_jail.ts`). `setpriv` links only libc and libcap-ng, and
 * bubblewrap libc, libcap and libselinux: what reads these names as root is the dynamic loader, the C
 * library and that shell. No interpreter runs as root, but the interpreters' names are refused too (below).
 * The locale's names stay allowed, but refuse a value holding `/`, which the C library would open as a path.
 */

/** The most variables one `[env]` table may hold. */
export const MAX_ENV_VARIABLES = 128;
/** The most bytes of one value (Linux refuses a single environment string past 128 KiB). */
export const MAX_ENV_VALUE_BYTES = 32 * 1024;
/** The most bytes of every name and value together. */
export const MAX_ENV_TOTAL_BYTES = 64 * 1024;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Names refused together, for one reason. */
interface RefusedNames {
  /** Names refused as they are. */
  names?: readonly string[];
  /** Prefixes refused as a whole: a program may read any name under them, today's and tomorrow's. */
  prefixes?: readonly string[];
  /** Names under `prefixes` that stay allowed. */
  allowed?: readonly string[];
  /** What follows the refused name: why, and what to do. `prefix` is the one it starts with, if any. */
  problem(prefix: string | undefined): string;
}

/** The problem of a name read by a program as it starts (`who`), and what setting one could do (`harm`). */
function readBy(who: string, harm: string, allowed: readonly string[] = []): RefusedNames["problem"] {
  const others = allowed.length
    ? ` (of these only ${allowed.slice(0, -1).join(", ")} and ${allowed.at(-1)} are allowed)`
    : "";
  return (prefix) => {
    if (prefix === undefined) return `is read by ${who} (setting it could ${harm}); choose another name`;
    const lead = `is reserved: names starting with ${prefix} are read by ${who}`;
    return `${lead} (setting one could ${harm}); choose another name${others}`;
  };
}

/**
 * Python variables that only tune the interpreter the app already runs in and load no code: hash
 * randomisation (ML code fixes it for reproducible runs), the standard streams' encoding, the UTF-8 mode,
 * tracebacks on a crash, and `.pyc` files (the Python worker writes none whatever this says).
 */
const PYTHON_ALLOWED = [
  "PYTHONDONTWRITEBYTECODE",
  "PYTHONFAULTHANDLER",
  "PYTHONHASHSEED",
  "PYTHONIOENCODING",
  "PYTHONUTF8",
];

/**
 * Every refused name, by who reads it; the first group that holds a name gives its reason. Names are
 * compared as the kernel and libc do: case matters (`path` is not `PATH`).
 */
const REFUSED: readonly RefusedNames[] = [
  {
    // The server's own settings, some of them secret (the master key, the database URL).
    prefixes: ["RUNPLANE_"],
    problem: (prefix) =>
      `is reserved: names starting with ${prefix}, which the platform's own variables use, are not an app's; `
      + "choose another name",
  },
  {
    // Set for every replica, each for a reason an app must not override: where programs and the home folder
    // are (the sandbox's private ones), where the custom runtime listens, how the Python worker starts and
    // finds its code, and which GPUs the replica was given.
    names: [
      "PATH",
      "HOME",
      "TMPDIR",
      "PORT",
      "PYTHONPATH",
      "PYTHONHOME",
      "PYTHONUNBUFFERED",
      "VIRTUAL_ENV",
      "CUDA_VISIBLE_DEVICES",
      "CUDA_DEVICE_ORDER",
      "NVIDIA_VISIBLE_DEVICES",
    ],
    problem: () => "is set by the platform; choose another name",
  },
  {
    // The dynamic loader reads these in every dynamically linked program before its `main`: `LD_PRELOAD`
    // and `LD_AUDIT` load a library, `GLIBC_TUNABLES` and the `MALLOC_*` aliases of its tunables change
    // the loader and the allocator (malloc tuning has no safe way in: it would apply to the root processes
    // too). A setuid program is shielded from them by the kernel's secure mode; a root one is not.
    names: ["GLIBC_TUNABLES"],
    prefixes: ["LD_", "MALLOC_"],
    problem: readBy(
      "the dynamic loader as any program starts, the root ones that start the app's jail among them",
      "load code into a process that still holds privileges, or change how it runs",
    ),
  },
  {
    // The C library reads these when a program converts characters (`GCONV_PATH` loads gconv modules: code),
    // loads locales or message catalogues (`LOCPATH`, `NLSPATH`), reads the time zone (`TZ`, `TZDIR`: a
    // path to a zone file), resolves a name (`HOSTALIASES`, `LOCALDOMAIN`, `RES_OPTIONS`, `RESOLV_*`) or
    // asks `getconf` (`GETCONF_DIR`, a program to run). This is glibc's own list of the variables a
    // setuid program must not trust (`UNSECURE_ENVVARS`), less the loader's above.
    names: [
      "GCONV_PATH",
      "GETCONF_DIR",
      "HOSTALIASES",
      "LOCALDOMAIN",
      "LOCPATH",
      "NIS_PATH",
      "NLSPATH",
      "RES_OPTIONS",
      "TZ",
      "TZDIR",
    ],
    prefixes: ["RESOLV_"],
    problem: readBy(
      "the C library in any program, the root ones that start the app's jail among them",
      "make a process that still holds privileges load code or read files the app chose",
    ),
  },
  {
    // A shell reads these as it starts, before its script: the cgroup is joined by `/bin/sh -c` as root,
    // before the jail. bash runs `BASH_ENV` (and `ENV` when interactive), takes its options from
    // `SHELLOPTS`/`BASHOPTS` (`xtrace` with `PS4` runs a command substitution), imports functions from
    // `BASH_FUNC_*`, and `IFS` and `CDPATH` change how a script's words split and where `cd` goes.
    names: ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH"],
    prefixes: ["BASH_FUNC_"],
    problem: readBy("a shell as it starts, and the app's jail is entered through a root one", "run code as root"),
  },
  {
    // Interpreters read these before the code they were given: each can load code first (`NODE_OPTIONS
    // --require`, `PERL5OPT -M`, `RUBYOPT -r`, `JAVA_TOOL_OPTIONS -javaagent`, `PYTHONWARNINGS` imports a
    // warning category's module, `PYTHONSTARTUP`, `PYTHON_PRESITE`) or put a folder of its own ahead of the
    // standard library (`PERL5LIB`, `PERLLIB`, `RUBYLIB`). No interpreter runs with privileges today, but
    // the platform's Python worker runs before the app's code, and a privileged helper may be one tomorrow.
    // Every `PYTHON*` name changes how CPython starts, and each release adds some (`PYTHONSAFEPATH`,
    // `PYTHON_GIL`, …), so the prefix is refused, but for the few that load no code (`PYTHON_ALLOWED`).
    // `NODE_PATH` stays allowed: it is searched only after core modules and `node_modules`, so it shadows
    // nothing. OpenSSL's variables (`OPENSSL_CONF`, `OPENSSL_MODULES`, `SSL_CERT_FILE`) stay allowed too: no
    // privileged process links OpenSSL, and apps set them for their own TLS.
    names: [
      "PERL5OPT",
      "PERL5LIB",
      "PERLLIB",
      "PERL5DB",
      "RUBYOPT",
      "RUBYLIB",
      "JAVA_TOOL_OPTIONS",
      "_JAVA_OPTIONS",
      "JDK_JAVA_OPTIONS",
      "NODE_OPTIONS",
    ],
    prefixes: ["PYTHON"],
    allowed: PYTHON_ALLOWED,
    problem: readBy(
      "an interpreter as it starts, before the code it was given",
      "load code into the platform's worker, or any interpreter in the jail, ahead of the app's",
      PYTHON_ALLOWED,
    ),
  },
];

/** Names that stay allowed but refuse a value holding `/`, for one reason. */
interface PathValueNames {
  /** Names refused such a value as they are. */
  names?: readonly string[];
  /** Prefixes under which every name is refused such a value. */
  prefixes?: readonly string[];
  /** What follows the name: why, and what to do. */
  problem: string;
}

const ROOT_STARTERS = "the root processes that start the app's jail";

/**
 * Every name refused a value holding `/`, by who reads it. Apps need the locale's names, so they stay
 * allowed, but `setpriv` calls `setlocale` and gettext as root, where the C library is not in its secure
 * mode (only a setuid program is), and there a locale name or a language holding `/` is a path it opens.
 */
const PATH_VALUE_NAMES: readonly PathValueNames[] = [
  {
    // Each category's locale comes from `LC_ALL`, then `LC_<category>`, then `LANG`; a name holding `/` is
    // loaded from that path as a locale file (glibc locale/findlocale.c). Every `LC_*` name is refused such
    // a value, today's categories and tomorrow's. Locale names hold none: `C.UTF-8`, `en_US.UTF-8`.
    names: ["LANG"],
    prefixes: ["LC_"],
    problem: `has a value holding /, which makes the C library open a locale file at that path in ${ROOT_STARTERS}; `
      + "use a locale name such as C.UTF-8",
  },
  {
    // gettext looks a message catalogue up in a folder named after each language `LANGUAGE` lists, and a
    // language holding `/` leads it out of the catalogues' folder (glibc intl/dcigettext.c).
    names: ["LANGUAGE"],
    problem: "has a value holding /, which makes the C library open a message catalogue under that path in "
      + `${ROOT_STARTERS}; use language names such as en_US:en`,
  },
];

/**
 * Why `name` cannot be an `[env]` variable or a project secret's name, or null. Given the `value` it would
 * hold, also why `name` cannot hold that value (a locale name holding `/`); a value that is not a string is
 * left to `envValueProblem`. A project secret's value is checked before it is sealed, and again before it
 * reaches a replica.
 */
export function envNameProblem(name: string, value?: unknown): string | null {
  if (!ENV_NAME.test(name)) {
    return "is not an environment variable name: use letters, digits and _, not starting with a digit";
  }
  for (const group of REFUSED) {
    if (group.names?.includes(name)) return group.problem(undefined);
    if (group.allowed?.includes(name)) continue;
    const prefix = group.prefixes?.find((p) => name.startsWith(p));
    if (prefix !== undefined) return group.problem(prefix);
  }
  if (typeof value !== "string" || !value.includes("/")) return null;
  const group = PATH_VALUE_NAMES.find((g) => g.names?.includes(name) || g.prefixes?.some((p) => name.startsWith(p)));
  return group?.problem ?? null;
}

/** Why `value` cannot be an `[env]` value, or null. */
export function envValueProblem(value: unknown): string | null {
  if (typeof value !== "string") return "must be a string (quote numbers and booleans)";
  if (value.includes("\0")) return "holds a NUL character, which an environment cannot carry";
  if (Buffer.byteLength(value) > MAX_ENV_VALUE_BYTES) return `is longer than ${MAX_ENV_VALUE_BYTES / 1024} KiB`;
  return null;
}

/**
 * The environment names an app's `[env]` and its project's secrets may not set (issue 43), each with what
 * its refusal must say, and names that stay allowed; then the values refused to locale names, which stay
 * allowed otherwise. Written out here, not read from the server's list, so that a name dropped from that
 * list fails the tests that loop over these.
 */

/** A refused name and what its refusal must say after the name: who reads it, and why that matters. */
export interface RefusedEnvName {
  name: string;
  why: RegExp;
}

const PLATFORM_OWN = /^is reserved: names starting with RUNPLANE_, which the platform's own variables use/;
const PLATFORM_SET = /^is set by the platform; choose another name$/;

/** A group's reason as an exact name (`is read by …`) or one under a prefix (`names starting with P are …`). */
function readBy(who: string, harm: string, prefix?: string): RegExp {
  const lead = prefix === undefined ? "is read by" : `is reserved: names starting with ${prefix} are read by`;
  const pronoun = prefix === undefined ? "it" : "one";
  return new RegExp(`^${lead} ${who}.*\\(setting ${pronoun} could ${harm}.*\\); choose another name`);
}

function loader(prefix?: string): RegExp {
  return readBy("the dynamic loader", "load code into a process that still holds privileges", prefix);
}

function libc(prefix?: string): RegExp {
  return readBy("the C library", "make a process that still holds privileges load code", prefix);
}

function shell(prefix?: string): RegExp {
  return readBy("a shell as it starts, and the app's jail is entered through a root one", "run code as root", prefix);
}

function interpreter(prefix?: string): RegExp {
  return readBy("an interpreter as it starts", "load code into the platform's worker", prefix);
}

function each(names: string[], why: RegExp): RefusedEnvName[] {
  return names.map((name) => ({ name, why }));
}

/** Every name that must be refused, by who reads it; a prefix is exercised with several of its names. */
export const REFUSED_ENV_NAMES: readonly RefusedEnvName[] = [
  ...each(["RUNPLANE_X", "RUNPLANE_MASTER_KEY", "RUNPLANE_DATABASE_URL"], PLATFORM_OWN),
  ...each([
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
  ], PLATFORM_SET),
  // The dynamic loader.
  ...each(["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG_OUTPUT"], loader("LD_")),
  { name: "GLIBC_TUNABLES", why: loader() },
  ...each(["MALLOC_CHECK_", "MALLOC_ARENA_MAX", "MALLOC_PERTURB_", "MALLOC_TRACE"], loader("MALLOC_")),
  // The C library.
  ...each([
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
  ], libc()),
  ...each(["RESOLV_HOST_CONF", "RESOLV_MULTI", "RESOLV_REORDER"], libc("RESOLV_")),
  // Shells.
  ...each(["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH"], shell()),
  ...each(["BASH_FUNC_echo", "BASH_FUNC_cd"], shell("BASH_FUNC_")),
  // Interpreters.
  ...each([
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
  ], interpreter()),
  ...each([
    "PYTHONINSPECT",
    "PYTHONSTARTUP",
    "PYTHONWARNINGS",
    "PYTHONSAFEPATH",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONPLATLIBDIR",
    "PYTHONBREAKPOINT",
    "PYTHONEXECUTABLE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONOPTIMIZE",
    "PYTHONMALLOC",
    "PYTHON_PRESITE",
    "PYTHON_GIL",
  ], interpreter("PYTHON")),
];

/**
 * Names that stay allowed: the few Python ones that load no code, names that merely look like refused
 * ones (other case, no prefix's underscore), and variables that act only in the app's own process.
 */
export const ALLOWED_ENV_NAMES: readonly string[] = [
  "PYTHONHASHSEED",
  "PYTHONDONTWRITEBYTECODE",
  "PYTHONIOENCODING",
  "PYTHONUTF8",
  "PYTHONFAULTHANDLER",
  "NODE_PATH",
  "SSL_CERT_FILE",
  "SSL_CERT_DIR",
  "OPENSSL_CONF",
  "LANG",
  "LC_ALL",
  "LDFLAGS",
  "TZ_NAME",
  "ENVIRONMENT",
  "path",
  "ld_preload",
  "HF_HOME",
  "OMP_NUM_THREADS",
];

/** A value refused to a name that is allowed, and what its refusal must say after the name. */
export interface RefusedEnvValue {
  name: string;
  value: string;
  why: RegExp;
}

/** A value's refusal: the C library would open `what` in a root process; what to `use` instead. */
function opensPath(what: string, use: string): RegExp {
  const lead = `^has a value holding /, which makes the C library open ${what}`;
  return new RegExp(`${lead} in the root processes that start the app's jail; use ${use}$`);
}

const LOCALE_FILE = opensPath("a locale file at that path", "a locale name such as C\\.UTF-8");
const CATALOGUE = opensPath("a message catalogue under that path", "language names such as en_US:en");

/**
 * Locale variables holding `/`: `setpriv` calls `setlocale` and gettext as root, and the C library opens
 * such a locale name or language as a path outside its secure mode. An absolute path, a relative one and
 * one hidden after a locale name's look.
 */
export const REFUSED_ENV_VALUES: readonly RefusedEnvValue[] = [
  { name: "LANG", value: "/app/locale", why: LOCALE_FILE },
  { name: "LANGUAGE", value: "en:../../../app/catalogue", why: CATALOGUE },
  { name: "LC_ALL", value: "/tmp/x", why: LOCALE_FILE },
  { name: "LC_CTYPE", value: "C.UTF-8/../../app/locale", why: LOCALE_FILE },
  { name: "LC_MESSAGES", value: "./locale", why: LOCALE_FILE },
];

/** Locale variables set to what apps set them to: each must still load. */
export const ALLOWED_ENV_VALUES: Readonly<Record<string, string>> = {
  LANG: "C.UTF-8",
  LANGUAGE: "en_US:en",
  LC_ALL: "en_US.UTF-8",
  LC_CTYPE: "C.UTF-8",
  LC_MESSAGES: "POSIX",
};

/**
 * What a `[dependencies.pip|apt|conda]` entry may say. Each entry becomes one requirement line for pip
 * or one `name=version` argument for apt and conda, so a name or version that could be read as an
 * option, a path, a URL or a second line is refused here, before anything is stored or built.
 */

/** Options of `pipEntryProblem`. */
export interface PipEntryOptions {
  /** `RUNPLANE_PIP_ALLOW_UNPINNED`: any name and version, options, paths and URLs included (still one line). */
  allowUnpinned?: boolean;
}

// PEP 508 project names, with optional extras: `uvicorn[standard]`.
const PIP_NAME_PART = "(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])";
const PIP_NAME = new RegExp(`^${PIP_NAME_PART}(?:\\[ *${PIP_NAME_PART}(?: *, *${PIP_NAME_PART})* *\\])?$`);

// PEP 440 public version (packaging's VERSION_PATTERN), then an optional local part `+cpu`.
const PUBLIC_VERSION = "v?(?:[0-9]+!)?[0-9]+(?:\\.[0-9]+)*"
  + "(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?"
  + "(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"
  + "(?:[-_.]?dev[-_.]?[0-9]*)?";
const VERSION = new RegExp(`^${PUBLIC_VERSION}(?:\\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$`, "i");
const PREFIX_VERSION = new RegExp(`^${PUBLIC_VERSION}\\.\\*$`, "i");
// `===` compares strings: a token that cannot start an option or hold a separator.
const ARBITRARY = /^[A-Za-z0-9][A-Za-z0-9._+!-]*$/;
const CLAUSE = /^(===|~=|==|!=|<=|>=|<|>) *(.*)$/;

const LINE_BREAK = /[\r\n\0]/;

function isAny(version: string): boolean {
  return version === "" || version === "*";
}

/** Whether `operator` `version` is one PEP 440 clause; `==`/`!=` may end in `.*`. */
function isClause(operator: string, version: string): boolean {
  if (operator === "===") return ARBITRARY.test(version);
  if (VERSION.test(version)) return true;
  return (operator === "==" || operator === "!=") && PREFIX_VERSION.test(version);
}

/** Whether `version` is "*", a bare version ("1.2", "1.2.*": pinned with `==`) or PEP 440 specifiers. */
export function isPipVersion(version: string): boolean {
  if (isAny(version)) return true;
  if (!CLAUSE.test(version)) return VERSION.test(version) || PREFIX_VERSION.test(version);
  return version.split(",").every((clause) => {
    const match = CLAUSE.exec(clause.trim());
    return match !== null && isClause(match[1], match[2]);
  });
}

/**
 * Why a `[dependencies.pip]` entry is refused, or null: by default the name must be a PEP 508 project
 * name (optional `[extras]`) and the version `*`, a version or PEP 440 specifiers (no options, paths,
 * URLs, environment markers). A line break is refused even when unpinned entries are allowed.
 */
export function pipEntryProblem(name: string, version: string, options: PipEntryOptions = {}): string | null {
  if (LINE_BREAK.test(name) || LINE_BREAK.test(version)) {
    return "holds a line break or NUL; one entry is one requirement line";
  }
  if (options.allowUnpinned) return name.trim() === "" ? "is an empty name" : null;
  if (!PIP_NAME.test(name)) {
    return "is not a package name: use a PEP 508 project name (letters, digits, and . _ - inside, optional [extras]); "
      + "pip options, paths and URLs are refused unless the operator sets RUNPLANE_PIP_ALLOW_UNPINNED";
  }
  if (!isPipVersion(version.trim())) {
    return `has version ${JSON.stringify(version)}, which is not a version specifier: use "*", "1.2" or PEP 440 `
      + 'specifiers such as ">=1,<2", "~=1.4", "==1.2.*" (URLs, paths, options and markers are refused unless the '
      + "operator sets RUNPLANE_PIP_ALLOW_UNPINNED)";
  }
  return null;
}

const APT_NAME = /^[a-z0-9][a-z0-9+.-]+$/;
const APT_VERSION = /^[A-Za-z0-9][A-Za-z0-9.+~:-]*$/;

/** Why a `[dependencies.apt]` entry is refused, or null: a Debian package name and `*` or a Debian version. */
export function aptEntryProblem(name: string, version: string): string | null {
  if (!APT_NAME.test(name)) {
    return "is not a Debian package name: use lowercase letters, digits and + . - (two characters or more, "
      + "starting with a letter or digit)";
  }
  const trimmed = version.trim();
  if (!isAny(trimmed) && !APT_VERSION.test(trimmed)) {
    return `has version ${JSON.stringify(version)}, which is not a Debian version: use "*" or letters, digits `
      + "and . + ~ : - (starting with a letter or digit)";
  }
  return null;
}

const CONDA_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;
const CONDA_VERSION = /^[A-Za-z0-9.*=<>!,_+-]+$/;

/** Why a `[dependencies.conda]` entry is refused, or null: a conda package name and `*` or a version spec. */
export function condaEntryProblem(name: string, version: string): string | null {
  if (!CONDA_NAME.test(name)) {
    return "is not a conda package name: use letters, digits and . _ - (starting with a letter, digit or _)";
  }
  const trimmed = version.trim();
  if (!isAny(trimmed) && !CONDA_VERSION.test(trimmed)) {
    return `has version ${JSON.stringify(version)}, which is not a conda version spec: use "*" or letters, digits `
      + "and . * = < > ! , _ + -";
  }
  return null;
}

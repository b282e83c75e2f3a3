/**
 * Whether a GPU is the model `[hardware] compute` asks for. nvidia-smi names models like `NVIDIA H100
 * 80GB HBM3` or `NVIDIA A100-SXM4-40GB`; an app migrated from the established platform names them like
 * `HOPPER_H100` or `AMPERE_A100_40GB`. Both are cut into words (at spaces, `_`, `-` and `.`, case
 * ignored), a leading architecture name is dropped from `compute`, and a GPU matches when every
 * remaining word of `compute` is a word of its model: `H100`, `HOPPER_H100` and `NVIDIA H100 80GB HBM3`
 * match `NVIDIA H100 80GB HBM3`; `A10` does not match `NVIDIA A100-SXM4-40GB`.
 */

/** Architecture names the established platform puts before a model (`AMPERE_A10`, `ADA_L4`). */
const ARCHITECTURES = new Set(["TURING", "VOLTA", "AMPERE", "ADA", "LOVELACE", "HOPPER", "BLACKWELL", "PASCAL"]);

function words(text: string): string[] {
  return text.toUpperCase().split(/[\s_.-]+/).filter(Boolean);
}

/** Whether a GPU whose model is `model` (null: unknown) satisfies `compute` (undefined: any GPU). */
export function gpuMatchesCompute(compute: string | undefined, model: string | null): boolean {
  if (compute === undefined) return true;
  if (model === null) return false;
  let wanted = words(compute);
  if (wanted.length > 1 && ARCHITECTURES.has(wanted[0])) wanted = wanted.slice(1);
  const have = new Set(words(model));
  return wanted.every((word) => have.has(word));
}

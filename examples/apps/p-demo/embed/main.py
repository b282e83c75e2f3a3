"""A batched model: POST /v4/p-demo/embed/embed with {"features": [0.1, 0.2, ...]} (64 numbers).

Concurrent calls are grouped into one call of embed() (runplane.toml's [functions.embed] batch): it gets
a list per parameter, one element per call, and returns a list with one result per call. One matrix
product serves the whole batch, which is what makes batching pay on a vectorised model.
"""

import numpy as np
from runplane import batched

INPUTS = 64
OUTPUTS = 16
# The model: a fixed weight matrix made at import (once per replica), the same on every replica.
WEIGHTS = np.random.default_rng(49).standard_normal((INPUTS, OUTPUTS)) / np.sqrt(INPUTS)


@batched(max_size=32, wait_ms=10)
def embed(features: list, normalize: bool = True) -> list:
    batch = np.asarray(features, dtype=np.float64)
    if batch.ndim != 2 or batch.shape[1] != INPUTS:
        raise ValueError(f"each call's features must be {INPUTS} numbers")
    out = np.tanh(batch @ WEIGHTS)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    scale = np.where(np.asarray(normalize)[:, None], np.maximum(norms, 1e-12), 1.0)
    return (out / scale).round(6).tolist()


def embed_one(features: list, normalize: bool = True) -> list:
    """The same model for one input, unbatched (the bench compares the two)."""
    return embed([features], [normalize])[0]

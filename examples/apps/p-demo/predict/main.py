"""Predictions of a linear model whose weights come from a project volume (see model.py)."""
import os

import model


def predict(features):
    """`features`: a number per feature (a list in model.FEATURES' order, or an object by name)."""
    if isinstance(features, dict):
        missing = [name for name in model.FEATURES if name not in features]
        if missing:
            raise ValueError(f"missing features: {', '.join(missing)}")
        values = [features[name] for name in model.FEATURES]
    else:
        values = list(features)
    if len(values) != len(model.WEIGHTS):
        raise ValueError(f"expected {len(model.WEIGHTS)} features ({', '.join(model.FEATURES)}), got {len(values)}")
    y = model.BIAS + sum(w * float(x) for w, x in zip(model.WEIGHTS, values))
    return {"prediction": round(y, 6)}


def info():
    """What the replica loaded, and whether it came preloaded from the template (a fork) or loaded itself."""
    return {
        "features": model.FEATURES,
        "weights_file": model.WEIGHTS_FILE,
        "preloaded": model.LOADED_BY != os.getpid(),
    }

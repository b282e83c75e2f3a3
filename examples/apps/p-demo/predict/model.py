"""The model's weights, read from the project's volume when the template preloads this module.

The file is a linear model as JSON: {"features": [names], "weights": [numbers], "bias": number}. Copy it
into the volume once (see examples/README.md); every replica of every deployment then reads it from there.
"""
import json
import os

WEIGHTS_FILE = os.environ.get("WEIGHTS_FILE", "/models/linear.json")


def _load(path):
    with open(path) as f:
        model = json.load(f)
    features, weights = model["features"], model["weights"]
    if len(features) != len(weights) or not all(isinstance(w, (int, float)) for w in weights):
        raise ValueError(f"{path}: features and weights must be lists of the same length, weights numbers")
    return features, [float(w) for w in weights], float(model.get("bias", 0.0))


FEATURES, WEIGHTS, BIAS = _load(WEIGHTS_FILE)
LOADED_BY = os.getpid()

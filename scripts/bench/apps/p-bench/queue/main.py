"""Holds its single slot, so async runs stay queued while the benchmark accepts them."""
import time


def run(name="world", seconds=600):
    time.sleep(seconds)
    return {"hello": name}

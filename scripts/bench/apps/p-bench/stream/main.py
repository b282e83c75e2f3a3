"""Streaming benchmark functions: many small items, and timestamps to measure first-event latency."""
import time


def run(n=100000):
    for i in range(n):
        yield {"i": i}


def first(count=3, pause=0.2):
    """Yields the wall-clock time (ms) of each yield, pausing between them."""
    for _ in range(count):
        yield {"yielded_at_ms": time.time() * 1000}
        time.sleep(pause)

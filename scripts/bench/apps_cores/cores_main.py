"""The `cores` scenario's functions: the same code Runplane and the aiohttp peer serve."""
import time


def run(name="world"):
    return {"hello": name}


def spin(ms=2):
    """Burns `ms` milliseconds of this thread's CPU time."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass
    return {"spun_ms": ms}

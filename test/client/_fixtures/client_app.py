"""The Python app the client and CLI tests deploy as p-test/py."""
import time

def run(name="world"):
    return {"message": f"Hello, {name}!"}

def add(a, b):
    return a + b

def boom():
    raise ValueError("bad value here")

def sleepy(seconds, started=None, finished=None):
    if started:
        open(started, "w").close()
    time.sleep(seconds)
    if finished:
        open(finished, "w").close()
    return {"slept": seconds}

def ticks(n, pause, done):
    for i in range(n):
        yield {"i": i}
        time.sleep(pause)
    yield "last tick"
    open(done, "w").close()

def endless(marker):
    try:
        i = 0
        while True:
            yield i
            i += 1
            time.sleep(0.2)
    finally:
        open(marker, "w").close()

def breaks():
    yield "ok"
    raise RuntimeError("went wrong mid-stream")

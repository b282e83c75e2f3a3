"""A streaming example: each yielded item is one server-sent event."""
import time


def run(count: int = 5, delay: float = 0.5):
    for i in range(count):
        yield {"index": i, "text": f"token {i}"}
        time.sleep(delay)
    yield "done"

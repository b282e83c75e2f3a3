"""The open-streams benchmark's generator: an item every `every` seconds, stamped with its wall-clock time."""
import asyncio
import time


async def tick(count=100, every=0.1, size=0):
    pad = "x" * size
    for i in range(count):
        yield {"i": i, "t": time.time() * 1000, "pad": pad}
        if every:
            await asyncio.sleep(every)

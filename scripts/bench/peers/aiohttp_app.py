"""The `cores` scenario's Python peer: aiohttp serving the benchmark's functions directly, no platform.

`WORKERS` processes (default 1) share `PORT` with SO_REUSEPORT, as a user of one big machine would run
it. POST /run is the echo function; POST /spin burns 2 ms of CPU (`spin` of the scenario's app), run on
the event loop as a `def` handler's work would be with one request at a time per process.
"""
import os
import sys
import uuid

from aiohttp import web

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "apps_cores"))
import cores_main  # noqa: E402  (the same functions Runplane serves in the scenario)


async def call(request, function):
    body = await request.read()
    kwargs = (await request.json()) if body else {}
    return web.json_response({"run_id": "run_" + uuid.uuid4().hex[:26], "result": function(**kwargs)})


async def run(request):
    return await call(request, cores_main.run)


async def spin(request):
    return await call(request, cores_main.spin)


async def health(_request):
    return web.json_response({"status": "ok"})


def serve():
    app = web.Application()
    app.add_routes([web.post("/run", run), web.post("/spin", spin), web.get("/", health)])
    web.run_app(app, host="127.0.0.1", port=int(os.environ["PORT"]), reuse_port=True, print=None, access_log=None)


def die_with_parent():
    """A forked process ends with the first one (prctl PR_SET_PDEATHSIG), which the benchmark stops."""
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


if __name__ == "__main__":
    workers = int(os.environ.get("WORKERS", "1"))
    for _ in range(workers - 1):
        if os.fork() == 0:
            die_with_parent()
            break
    serve()

"""The uvicorn + FastAPI baseline: the benchmark's echo function served directly, no platform."""
import importlib.util
import os
import sys
import time
import uuid

from fastapi import FastAPI, Request

spec = importlib.util.spec_from_file_location(
    "bench_echo", os.path.join(os.path.dirname(__file__), "..", "apps", "p-bench", "echo", "main.py")
)
echo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(echo)

app = FastAPI()


@app.post("/run")
async def run(request: Request):
    body = await request.body()
    kwargs = (await request.json()) if body else {}
    started = time.perf_counter()
    result = echo.run(**kwargs)
    return {"run_id": "run_" + uuid.uuid4().hex[:26], "run_time_ms": (time.perf_counter() - started) * 1000, "result": result}


@app.get("/")
def health():
    return {"status": "ok"}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning", access_log=False)
    sys.exit(0)

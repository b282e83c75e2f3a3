"""Runplane's Python worker harness: one warm replica of an app's main.py.

Dependency-free (standard library only). The server talks to it over two dedicated pipes, never over
stdout/stderr: fd 3 carries newline-delimited JSON requests from the server, fd 4 carries
newline-delimited JSON messages back. When fd 3 closes (the server went away) the worker exits.

Usage: python3 _worker.py <app_dir> <max_concurrency>
"""

import asyncio
import collections.abc
import contextvars
import importlib.util
import inspect
import json
import os
import sys
import threading
import traceback

REQUESTS_FD = 3
MESSAGES_FD = 4

_write_lock = threading.Lock()
_current_call = contextvars.ContextVar("runplane_call", default=None)
_real_stdout = sys.stdout
_real_stderr = sys.stderr


def send(message):
    write_line(json.dumps(message, separators=(",", ":")))


def write_line(text):
    """Writes one protocol line whole, even from several threads at once."""
    data = (text + "\n").encode("utf-8")
    with _write_lock:
        view = memoryview(data)
        while view:
            written = os.write(MESSAGES_FD, view)
            view = view[written:]


class RunOutput:
    """Replaces sys.stdout/sys.stderr: text written during a call is sent as that call's log."""

    def __init__(self, name, fallback):
        self.name = name
        self.fallback = fallback

    def write(self, text):
        call_id = _current_call.get()
        if call_id is None:
            return self.fallback.write(text)
        if text:
            send({"op": "log", "id": call_id, "stream": self.name, "text": text})
        return len(text)

    def flush(self):
        if _current_call.get() is None:
            self.fallback.flush()

    def isatty(self):
        return False

    @property
    def encoding(self):
        return "utf-8"


class Cancelled(Exception):
    pass


def describe(error):
    return {
        "type": type(error).__name__,
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }


def encode(value):
    """The JSON text of a value, or raises TypeError/ValueError when it is not JSON-serialisable."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


class Worker:
    def __init__(self, module, loop, executor_size):
        self.module = module
        self.loop = loop
        self.cancelled = set()
        self.tasks = {}
        from concurrent.futures import ThreadPoolExecutor

        self.executor = ThreadPoolExecutor(max_workers=executor_size)

    def handle(self, message):
        op = message.get("op")
        if op == "call":
            task = self.loop.create_task(self.call(message))
            self.tasks[message["id"]] = task
            task.add_done_callback(lambda _t, call_id=message["id"]: self.tasks.pop(call_id, None))
        elif op == "cancel":
            call_id = message["id"]
            self.cancelled.add(call_id)
            task = self.tasks.get(call_id)
            if task is not None and getattr(task, "runplane_async", False):
                task.cancel()

    def in_thread(self, call_id, fn, *args):
        context = contextvars.copy_context()
        context.run(_current_call.set, call_id)
        return self.loop.run_in_executor(self.executor, context.run, fn, *args)

    async def call(self, message):
        call_id = message["id"]
        _current_call.set(call_id)
        name = message["fn"]
        kwargs = message.get("kwargs") or {}
        fn = None if name.startswith("_") else getattr(self.module, name, None)
        if fn is None or not callable(fn) or inspect.isclass(fn):
            send({"op": "fail", "id": call_id, "kind": "not_found", "type": "LookupError",
                  "message": f"main.py has no public function named {name}; check the name in the URL"})
            return
        try:
            signature = inspect.signature(fn)
            if "run_id" in signature.parameters:
                kwargs = {**kwargs, "run_id": message["run_id"]}
            signature.bind(**kwargs)
        except TypeError as error:
            send({"op": "fail", "id": call_id, "kind": "invalid_arguments", "type": "TypeError",
                  "message": f"{name}() {error}"})
            return
        except ValueError:
            pass
        try:
            if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
                asyncio.current_task().runplane_async = True
                result = fn(**kwargs)
            else:
                result = await self.in_thread(call_id, lambda: fn(**kwargs))
            if inspect.isawaitable(result):
                asyncio.current_task().runplane_async = True
                result = await result
            if isinstance(result, collections.abc.AsyncIterator):
                await self.stream_async(call_id, result)
            elif isinstance(result, collections.abc.Iterator) and not isinstance(result, (str, bytes, dict, list)):
                await self.stream_sync(call_id, result)
            else:
                try:
                    text = encode(result)
                except (TypeError, ValueError) as error:
                    send({"op": "fail", "id": call_id, "kind": "not_serializable", "type": type(error).__name__,
                          "message": f"{name}() returned a value that is not JSON-serialisable: {error}; return "
                                     "dicts, lists, strings, numbers, booleans or None"})
                    return
                send_raw_result(call_id, text)
        except asyncio.CancelledError:
            send({"op": "cancelled", "id": call_id})
        except Cancelled:
            send({"op": "cancelled", "id": call_id})
        except BaseException as error:  # noqa: BLE001 - the function's failure is the run's failure
            send({"op": "fail", "id": call_id, "kind": "exception", **describe(error)})
        finally:
            self.cancelled.discard(call_id)

    def send_item(self, call_id, value):
        try:
            text = value if isinstance(value, str) else encode(value)
        except (TypeError, ValueError) as error:
            raise TypeError(f"a yielded item is not JSON-serialisable: {error}") from None
        # The item's JSON text is spliced into the message so it is encoded once; a string item travels
        # as a JSON string and arrives as a string.
        value_json = json.dumps(text) if isinstance(value, str) else text
        write_line('{"op":"item","id":' + json.dumps(call_id) + ',"value":' + value_json + "}")

    async def stream_sync(self, call_id, iterator):
        asyncio.current_task().runplane_async = False
        send({"op": "stream", "id": call_id})

        def pump():
            # The whole iteration runs in one worker thread and writes each item as it is yielded: a
            # thread hop per item would cost more than most items take to make.
            for item in iterator:
                if call_id in self.cancelled:
                    raise Cancelled()
                self.send_item(call_id, item)
            if call_id in self.cancelled:
                raise Cancelled()

        try:
            await self.in_thread(call_id, pump)
        except Cancelled:
            await self.in_thread(call_id, close_iterator, iterator)
            raise
        send({"op": "end", "id": call_id})

    async def stream_async(self, call_id, iterator):
        # A cancelled stream is closed at its next yield (GeneratorExit), never by cancelling the task,
        # which would raise CancelledError inside the generator instead.
        asyncio.current_task().runplane_async = False
        send({"op": "stream", "id": call_id})
        try:
            async for item in iterator:
                if call_id in self.cancelled:
                    raise Cancelled()
                self.send_item(call_id, item)
        except (asyncio.CancelledError, Cancelled):
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            raise
        send({"op": "end", "id": call_id})


def close_iterator(iterator):
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def send_raw_result(call_id, text):
    # The result is already JSON text; splice it in so it is not encoded twice.
    write_line('{"op":"result","id":' + json.dumps(call_id) + ',"value":' + text + "}")


def read_requests(loop, worker):
    with os.fdopen(REQUESTS_FD, "rb", buffering=0) as pipe:
        buffer = b""
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    loop.call_soon_threadsafe(worker.handle, json.loads(line))
    # The server went away: leave no orphan behind.
    os._exit(0)


def load_module(app_dir):
    sys.path.insert(0, app_dir)
    os.chdir(app_dir)
    spec = importlib.util.spec_from_file_location("main", os.path.join(app_dir, "main.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["main"] = module
    spec.loader.exec_module(module)
    return module


def main():
    app_dir = sys.argv[1]
    concurrency = int(sys.argv[2])
    sys.stdout = RunOutput("stdout", _real_stdout)
    sys.stderr = RunOutput("stderr", _real_stderr)
    try:
        module = load_module(app_dir)
    except BaseException as error:  # noqa: BLE001 - reported to the server as the app's load error
        send({"op": "load_error", **describe(error)})
        _real_stderr.flush()
        os._exit(3)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = Worker(module, loop, concurrency)
    threading.Thread(target=read_requests, args=(loop, worker), daemon=True).start()
    send({"op": "ready", "pid": os.getpid()})
    loop.run_forever()


if __name__ == "__main__":
    main()

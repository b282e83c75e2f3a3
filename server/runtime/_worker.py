"""Runplane's Python worker harness: one warm replica of an app's main.py.

Dependency-free (standard library only). The server talks to it over two dedicated pipes, never over
stdout/stderr: fd 3 carries newline-delimited JSON requests from the server, fd 4 carries
newline-delimited JSON messages back. When fd 3 closes (the server went away) the worker exits.

Calls of plain `def` functions never touch the event loop: the reader thread checks the arguments and
hands the call to a pool thread, which runs it and writes the answer itself. `async def` functions (and
whatever returns an awaitable or an async iterator) run on the asyncio loop.

Usage: python3 _worker.py <app_dir> <max_concurrency>

The protocol, the same table as server/runtime/_worker_protocol.ts (add an op in both places). Each line
is one JSON object with an "op":

    direction        op           fields                                        meaning
    server -> worker call         id, run_id, fn, kwargs (object)               run fn(**kwargs)
    server -> worker cancel       id                                            stop that call
    server -> worker credit       id, items, bytes                              a stream's reader consumed that much
    worker -> server ready        pid                                           main.py loaded; calls may come
    worker -> server load_error   type, message, traceback                      main.py failed to load; exits
    worker -> server log          id, stream ("stdout"/"stderr"), text          the call's output
    worker -> server result       id, value | bytes (then the raw payload)      the call returned (final)
    worker -> server stream       id                                            an iterator: items follow
    worker -> server item         id, value                                     one yielded item
    worker -> server end          id                                            the iterator is exhausted (final)
    worker -> server cancelled    id                                            stopped after a cancel (final)
    worker -> server fail         id, kind, type, message, traceback?           the call failed (final)

A result whose JSON text is RAW_RESULT_BYTES or longer is sent as the header line
{"op":"result","id":...,"bytes":N} followed by exactly N bytes of that JSON text (ASCII: the encoder
keeps ensure_ascii) and no newline; the server checks the text without parsing it and hands it through.

fail kinds: not_found, invalid_arguments, bad_request (the call line could not be read), not_serializable,
too_large (a result or item over MAX_MESSAGE_BYTES), exception. Every call gets exactly one final message.
A message is at most MAX_MESSAGE_BYTES including its newline; the server ends a worker that sends a longer
line, an unknown op, a malformed line or a message for a call it was not given. A stream may have
STREAM_WINDOW_ITEMS items and STREAM_WINDOW_BYTES bytes of item lines sent and not yet credited back (and
always one item), so a stream's generator waits while its reader does not read.
"""

import asyncio
import collections.abc
import contextvars
import importlib.util
import inspect
import json
import os
import queue
import re
import sys
import threading
import traceback

REQUESTS_FD = 3
MESSAGES_FD = 4
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
RAW_RESULT_BYTES = 1024 * 1024
STREAM_WINDOW_ITEMS = 64
STREAM_WINDOW_BYTES = 128 * 1024
# The server writes a call's id first, so a line that cannot be parsed can still be failed by name.
_LEADING_ID = re.compile(rb'^\{"op":"call","id":("(?:[^"\\]|\\.)*")')

_write_lock = threading.Lock()
_current_call = contextvars.ContextVar("runplane_call", default=None)
_real_stdout = sys.stdout
_real_stderr = sys.stderr
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_encode_strict = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def send(message):
    write_line(_dumps(message))


class TooLarge(Exception):
    """A result or item whose message would pass MAX_MESSAGE_BYTES."""


def encode_line(text):
    data = (text + "\n").encode("utf-8")
    if len(data) > MAX_MESSAGE_BYTES:
        raise TooLarge(f"its JSON is {len(data)} bytes; the limit of one result or item is {MAX_MESSAGE_BYTES} bytes")
    return data


def write_line(text):
    """Writes one protocol line whole, even from several threads at once; returns its size in bytes."""
    return write_bytes(text if isinstance(text, bytes) else (text + "\n").encode("utf-8"))


def write_bytes(data):
    with _write_lock:
        written = os.write(MESSAGES_FD, data)
        if written < len(data):
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(MESSAGES_FD, view):]
    return len(data)


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
    return _encode_strict(value)


class Function:
    """A public function of main.py, with what a call needs to know about it, worked out once."""

    def __init__(self, name, fn):
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None
        parameters = self.signature.parameters if self.signature else {}
        self.wants_run_id = "run_id" in parameters
        # The common signature (named parameters only) is checked with two set operations; anything
        # else goes through Signature.bind.
        kinds = {p.kind for p in parameters.values()}
        simple = self.signature is not None and kinds <= {
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
        self.names = frozenset(parameters) if simple else None
        self.required = frozenset(n for n, p in parameters.items() if p.default is p.empty) if simple else None

    def arguments_error(self, kwargs):
        """Why `kwargs` cannot be passed, or None when they can."""
        if self.signature is None:
            return None
        if self.names is not None:
            keys = kwargs.keys()
            if keys <= self.names and self.required <= keys:
                return None
        try:
            self.signature.bind(**kwargs)
        except TypeError as error:
            return f"{self.name}() {error}"
        return None


class StreamWindow:
    """A stream's credits: how much it sent that the server has not yet reported consumed."""

    def __init__(self, loop):
        self.loop = loop
        self.items = 0
        self.bytes = 0
        self.closed = False
        self.condition = threading.Condition()
        self.event = None

    def has_room(self):
        return self.closed or self.items <= 0 or (
            self.items < STREAM_WINDOW_ITEMS and self.bytes < STREAM_WINDOW_BYTES)

    def sent(self, size):
        with self.condition:
            self.items += 1
            self.bytes += size

    def credit(self, items, size):
        """Called on the reader thread for a `credit` message."""
        with self.condition:
            self.items -= items
            self.bytes -= size
            self.wake()

    def close(self):
        """Wakes a waiting stream for good (the call was cancelled)."""
        with self.condition:
            self.closed = True
            self.wake()

    def wake(self):
        self.condition.notify_all()
        if self.event is not None:
            self.loop.call_soon_threadsafe(self.event.set)

    def wait_in_thread(self):
        with self.condition:
            while not self.has_room():
                self.condition.wait()

    async def wait_async(self):
        while True:
            with self.condition:
                if self.has_room():
                    return
                if self.event is None:
                    self.event = asyncio.Event()
                self.event.clear()
                event = self.event
            await event.wait()


def send_fail(call_id, kind, error_type, message):
    send({"op": "fail", "id": call_id, "kind": kind, "type": error_type, "message": message})


class Worker:
    def __init__(self, module, loop, concurrency):
        self.module = module
        self.loop = loop
        self.concurrency = concurrency
        self.cancelled = set()
        self.windows = {}
        self.tasks = {}
        self.functions = {}
        # The pool of threads for `def` functions, started as calls need them (never more than the
        # replica's concurrency, which the server already enforces).
        self.jobs = queue.SimpleQueue()
        self.pool_lock = threading.Lock()
        self.threads = 0
        self.idle = 0

    def function(self, name):
        entry = self.functions.get(name)
        if entry is None and name not in self.functions:
            fn = None if name.startswith("_") else getattr(self.module, name, None)
            entry = None if fn is None or not callable(fn) or inspect.isclass(fn) else Function(name, fn)
            self.functions[name] = entry
        return entry

    def handle(self, message):
        """Called on the reader thread for every request."""
        op = message.get("op")
        if op == "call":
            self.start_call(message)
        elif op == "credit":
            window = self.windows.get(message["id"])
            if window is not None:
                window.credit(int(message["items"]), int(message["bytes"]))
        elif op == "cancel":
            self.cancelled.add(message["id"])
            window = self.windows.get(message["id"])
            if window is not None:
                window.close()
            self.loop.call_soon_threadsafe(self.cancel_task, message["id"])

    def start_call(self, message):
        call_id = message["id"]
        name = message["fn"]
        function = self.function(name)
        if function is None:
            send_fail(call_id, "not_found", "LookupError",
                      f"main.py has no public function named {name}; check the name in the URL")
            return
        kwargs = message.get("kwargs") or {}
        if function.wants_run_id:
            kwargs = {**kwargs, "run_id": message["run_id"]}
        problem = function.arguments_error(kwargs)
        if problem is not None:
            send_fail(call_id, "invalid_arguments", "TypeError", problem)
            return
        if function.is_async:
            self.loop.call_soon_threadsafe(self.start_task, call_id, self.call_async(call_id, function, kwargs))
        else:
            self.submit((call_id, function, kwargs))

    # --- `def` functions, on pool threads -------------------------------------------------------

    def submit(self, job):
        with self.pool_lock:
            start = self.idle == 0 and self.threads < self.concurrency
            if start:
                self.threads += 1
            elif self.idle > 0:
                self.idle -= 1
        if start:
            threading.Thread(target=self.serve_jobs, args=(job,), daemon=True).start()
        else:
            self.jobs.put(job)

    def serve_jobs(self, job):
        while True:
            self.call_in_thread(*job)
            with self.pool_lock:
                self.idle += 1
            job = self.jobs.get()

    def call_in_thread(self, call_id, function, kwargs):
        token = _current_call.set(call_id)
        try:
            result = function.fn(**kwargs)
            if inspect.isawaitable(result) or isinstance(result, collections.abc.AsyncIterator):
                # A `def` that hands back a coroutine or an async iterator: finish it on the loop.
                self.loop.call_soon_threadsafe(self.start_task, call_id, self.finish_async(call_id, function, result))
                return
            if isinstance(result, collections.abc.Iterator) and not isinstance(result, (str, bytes, dict, list)):
                self.stream_in_thread(call_id, result)
            else:
                self.send_result(call_id, function, result)
        except Cancelled:
            send({"op": "cancelled", "id": call_id})
        except TooLarge as error:
            send_fail(call_id, "too_large", "ValueError", f"{function.name}() produced a value too large to send: {error}")
        except BaseException as error:  # noqa: BLE001 - the function's failure is the run's failure
            send({"op": "fail", "id": call_id, "kind": "exception", **describe(error)})
        finally:
            _current_call.reset(token)
            self.cancelled.discard(call_id)

    def open_window(self, call_id):
        window = StreamWindow(self.loop)
        self.windows[call_id] = window
        if call_id in self.cancelled:
            window.close()
        return window

    def stream_in_thread(self, call_id, iterator):
        send({"op": "stream", "id": call_id})
        window = self.open_window(call_id)
        try:
            # Each item is written as it is yielded, from this thread: a hop per item would cost more
            # than most items take to make. The next item is asked for only when the window has room.
            while True:
                window.wait_in_thread()
                if call_id in self.cancelled:
                    raise Cancelled()
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                window.sent(self.send_item(call_id, item))
            if call_id in self.cancelled:
                raise Cancelled()
        except (Cancelled, TooLarge):
            close_iterator(iterator)
            raise
        finally:
            self.windows.pop(call_id, None)
        send({"op": "end", "id": call_id})

    # --- `async def` functions, on the loop ------------------------------------------------------

    def start_task(self, call_id, coroutine):
        task = self.loop.create_task(coroutine)
        task.runplane_async = True
        self.tasks[call_id] = task
        task.add_done_callback(lambda _t: self.tasks.pop(call_id, None))
        if call_id in self.cancelled:
            task.cancel()

    def cancel_task(self, call_id):
        task = self.tasks.get(call_id)
        if task is not None and task.runplane_async:
            task.cancel()

    async def call_async(self, call_id, function, kwargs):
        _current_call.set(call_id)
        await self.guarded(call_id, function, lambda: function.fn(**kwargs))

    async def finish_async(self, call_id, function, result):
        _current_call.set(call_id)
        await self.guarded(call_id, function, lambda: result)

    async def guarded(self, call_id, function, start):
        try:
            result = start()
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, collections.abc.AsyncIterator):
                await self.stream_async(call_id, result)
            elif isinstance(result, collections.abc.Iterator) and not isinstance(result, (str, bytes, dict, list)):
                # An async function that returned a plain generator: iterate it off the loop.
                asyncio.current_task().runplane_async = False
                context = contextvars.copy_context()
                await self.loop.run_in_executor(None, context.run, self.stream_in_thread, call_id, result)
            else:
                self.send_result(call_id, function, result)
        except (asyncio.CancelledError, Cancelled):
            send({"op": "cancelled", "id": call_id})
        except TooLarge as error:
            send_fail(call_id, "too_large", "ValueError", f"{function.name}() produced a value too large to send: {error}")
        except BaseException as error:  # noqa: BLE001 - the function's failure is the run's failure
            send({"op": "fail", "id": call_id, "kind": "exception", **describe(error)})
        finally:
            self.cancelled.discard(call_id)

    async def stream_async(self, call_id, iterator):
        # A cancelled stream is closed at its next yield (GeneratorExit), never by cancelling the task,
        # which would raise CancelledError inside the generator instead.
        asyncio.current_task().runplane_async = False
        send({"op": "stream", "id": call_id})
        window = self.open_window(call_id)
        try:
            while True:
                await window.wait_async()
                if call_id in self.cancelled:
                    raise Cancelled()
                try:
                    item = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                window.sent(self.send_item(call_id, item))
        except (asyncio.CancelledError, Cancelled, TooLarge):
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            raise
        finally:
            self.windows.pop(call_id, None)
        send({"op": "end", "id": call_id})

    # --- answers ---------------------------------------------------------------------------------

    def send_result(self, call_id, function, result):
        try:
            text = encode(result)
        except (TypeError, ValueError) as error:
            send_fail(call_id, "not_serializable", type(error).__name__,
                      f"{function.name}() returned a value that is not JSON-serialisable: {error}; return "
                      "dicts, lists, strings, numbers, booleans or None")
            return
        if len(text) >= RAW_RESULT_BYTES:
            # A big result follows its header as raw bytes, which the server hands through unparsed.
            data = text.encode("ascii")
            if len(data) > MAX_MESSAGE_BYTES:
                raise TooLarge(f"its JSON is {len(data)} bytes; the limit of one result is {MAX_MESSAGE_BYTES} bytes")
            header = '{"op":"result","id":' + _dumps(call_id) + ',"bytes":' + str(len(data)) + "}\n"
            write_bytes(header.encode("ascii") + data)
            return
        # The result is already JSON text; splice it in so it is not encoded twice.
        write_bytes(encode_line('{"op":"result","id":' + _dumps(call_id) + ',"value":' + text + "}"))

    def send_item(self, call_id, value):
        try:
            text = value if isinstance(value, str) else encode(value)
        except (TypeError, ValueError) as error:
            raise TypeError(f"a yielded item is not JSON-serialisable: {error}") from None
        # The item's JSON text is spliced into the message so it is encoded once; a string item travels
        # as a JSON string and arrives as a string.
        value_json = _dumps(text) if isinstance(value, str) else text
        return write_bytes(encode_line('{"op":"item","id":' + _dumps(call_id) + ',"value":' + value_json + "}"))


def close_iterator(iterator):
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def handle_line(worker, line):
    """Handles one request; a request that cannot be read fails its call alone, never the reader."""
    try:
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("a request must be a JSON object")
        worker.handle(message)
    except Exception as error:  # noqa: BLE001 - RecursionError, ValueError, KeyError, MemoryError, ...
        match = _LEADING_ID.match(line)
        if match is None:
            _real_stderr.write(f"runplane worker: ignored an unreadable request: {type(error).__name__}: {error}\n")
            return
        send_fail(json.loads(match.group(1)), "bad_request", type(error).__name__,
                  f"the worker could not read the call: {type(error).__name__}: {error}")


def read_requests(worker):
    with os.fdopen(REQUESTS_FD, "rb", buffering=0) as pipe:
        # Chunks of an unfinished line are joined once, when its newline arrives.
        parts = []
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            start = 0
            while True:
                newline = chunk.find(b"\n", start)
                if newline < 0:
                    if start < len(chunk):
                        parts.append(chunk[start:])
                    break
                line = chunk[start:newline]
                if parts:
                    parts.append(line)
                    line = b"".join(parts)
                    parts = []
                if line:
                    handle_line(worker, line)
                start = newline + 1
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
    threading.Thread(target=read_requests, args=(worker,), daemon=True).start()
    send({"op": "ready", "pid": os.getpid()})
    loop.run_forever()


if __name__ == "__main__":
    main()

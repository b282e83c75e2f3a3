"""Runplane's Python worker harness: one warm replica of an app's main.py.

Dependency-free (standard library only). The server talks to it over two dedicated pipes, never over
stdout/stderr: fd 3 carries newline-delimited JSON requests from the server, fd 4 carries
newline-delimited JSON messages back. When fd 3 closes (the server went away) the worker exits.

Calls of plain `def` functions never touch the event loop: the reader thread checks the arguments and
hands the call to a pool thread, which runs it and writes the answer itself. `async def` functions (and
whatever returns an awaitable or an async iterator) run on the asyncio loop, on the main thread, which is
started (and asyncio imported) at the first such call.

What this harness imports before it says `ready` is part of every cold start, so it keeps to the few
modules the common call needs (json, threading and the like); asyncio, inspect, traceback, socket and
random cost tens of milliseconds together and are imported where they are first needed
(docs/performance.md, "Cold start: what Runplane adds").

Usage: python3 _worker.py <app_dir> <max_concurrency> [--preload=mod1,mod2] [--channels=5,6,...]
       [--batch={"fn":[max_size,wait_ms],...}] [--template [--unjailed]]

Batched functions (--batch, from runplane.toml's [functions.<name>] batch): calls of such a function are
grouped here, in front of the function, whatever channel they came on (see Batcher); the function gets
a list per parameter and returns a list, whose elements answer the calls one each. `import runplane`
gives the `batched` decorator, which must agree with the toml (checked at load, a load error if not).

Extra channels (`--channels`, or a fork request's `channels`: that many more connections to its socket,
named c0, c1, ...): on a host with several front-door processes, each holds one of its replicas'
channels and makes its calls on it directly; its supervisor keeps fd 3 and 4, and the replica's life.
Each channel is one socket carrying the same protocol both ways; a call's messages go back on the
channel it came on (`ready` and `load_error` only on the server's). A channel that closes stops the
calls made on it; only fd 3's end makes the worker exit.

With --template the process is an app's template (a fork server, like multiprocessing's `forkserver`
with its preload): it imports the preload modules and main.py without calling anything, checks that a
fork of it would be sound (no other thread, CUDA not initialised), says so, and then only forks replicas
on request, each of which connects to the server's Unix socket and serves as a worker does. The template
runs single-threaded on its main thread so that a fork copies no thread's half-held lock.

Template protocol (fd 3 in, fd 4 out, newline-delimited JSON):

    direction          op          fields                     meaning
    server -> template fork        id, socket, env            fork a replica; it connects to socket
    server -> template kill        pid                        SIGKILL that forked replica's process group
    template -> server template    pid, unsafe                loaded; unsafe is why forks are refused, or null
    template -> server load_error  type, message, traceback   the preload or main.py failed to load; exits
    template -> server forked      id, pid                    the replica's process (pid in the template's view)
    template -> server exited      pid, reason                a forked replica's process ended
    replica  -> server hello       id, pid                    first line on its socket; then waits for "start"
    server   -> replica start                                 serve: the worker protocol follows on the socket

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
    worker -> server batch        fn, size, wait_ms                             a batch of fn left (on the server's channel)

A result whose JSON text is RAW_RESULT_BYTES or longer is sent as the header line
{"op":"result","id":...,"bytes":N} followed by exactly N bytes of that JSON text (ASCII: the encoder
keeps ensure_ascii) and no newline; the server checks the text without parsing it and hands it through.

fail kinds: not_found, invalid_arguments, bad_request (the call line could not be read), not_serializable,
too_large (a result or item over MAX_MESSAGE_BYTES), bad_batch_result (a batched function's result is not a
list with one element per call), exception. Every call gets exactly one final message.
A message is at most MAX_MESSAGE_BYTES including its newline; the server ends a worker that sends a longer
line, an unknown op, a malformed line or a message for a call it was not given. A stream may have
STREAM_WINDOW_ITEMS items and STREAM_WINDOW_BYTES bytes of item lines sent and not yet credited back (and
always one item), so a stream's generator waits while its reader does not read.
"""

import contextvars
import importlib.util
import json
import os
import queue
import re
import select
import signal
import sys
import threading

REQUESTS_FD = 3
MESSAGES_FD = 4
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
RAW_RESULT_BYTES = 1024 * 1024
STREAM_WINDOW_ITEMS = 64
STREAM_WINDOW_BYTES = 128 * 1024
# The server writes a call's id first, so a line that cannot be parsed can still be failed by name.
_LEADING_ID = re.compile(rb'^\{"op":"call","id":("(?:[^"\\]|\\.)*")')

# The call a thread or task runs: (its id, the channel it came on), for its output.
_current_call = contextvars.ContextVar("runplane_call", default=None)
_real_stdout = sys.stdout
_real_stderr = sys.stderr
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_encode_strict = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


class Channel:
    """A connection the worker protocol runs on: the server's own (fd 3 in, fd 4 out), or one of the
    extra channels a host's front-door processes call on directly (one socket each, both ways). Lines
    are written whole under its lock; a write to an extra channel whose peer is gone is dropped."""

    def __init__(self, read_fd, write_fd):
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.lock = threading.Lock()
        self.open = True

    def write(self, data):
        with self.lock:
            if not self.open:
                return len(data)
            try:
                written = os.write(self.write_fd, data)
                if written < len(data):
                    view = memoryview(data)[written:]
                    while view:
                        view = view[os.write(self.write_fd, view):]
            except OSError:
                if self is OWNER:
                    raise
                self.open = False
        return len(data)

    def close(self):
        with self.lock:
            self.open = False
            if self.read_fd is not None:
                os.close(self.read_fd)
                self.read_fd = None


OWNER = Channel(REQUESTS_FD, MESSAGES_FD)
# Calls in flight that came on an extra channel, by id (run ids are unique); the rest came on OWNER's.
_call_channels = {}
FINAL_OPS = frozenset(("result", "end", "cancelled", "fail"))


def channel_of(call_id, final=False):
    """The channel a call's messages go to; its final message forgets it."""
    if not _call_channels:
        return OWNER
    return (_call_channels.pop if final else _call_channels.get)(call_id, OWNER)


def send(message, channel=None):
    channel = channel or channel_of(message.get("id"), message.get("op") in FINAL_OPS)
    channel.write((_dumps(message) + "\n").encode("utf-8"))


class TooLarge(Exception):
    """A result or item whose message would pass MAX_MESSAGE_BYTES."""


def encode_line(text):
    data = (text + "\n").encode("utf-8")
    if len(data) > MAX_MESSAGE_BYTES:
        raise TooLarge(f"its JSON is {len(data)} bytes; the limit of one result or item is {MAX_MESSAGE_BYTES} bytes")
    return data


class RunOutput:
    """Replaces sys.stdout/sys.stderr: text written during a call is sent as that call's log."""

    def __init__(self, name, fallback):
        self.name = name
        self.fallback = fallback

    def write(self, text):
        current = _current_call.get()
        if current is None:
            return self.fallback.write(text)
        if isinstance(current, BatchOutput):
            current.write(self.name, text)
            return len(text)
        if text:
            call_id, channel = current
            send({"op": "log", "id": call_id, "stream": self.name, "text": text}, channel)
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


# The app's folder, as given and as resolved (set by main): a traceback keeps only frames of files in it.
_app_dirs = ()


def app_path(filename):
    """`filename` relative to the app's folder, or None when it is not one of the app's files."""
    if not filename or filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>: no file
        return None
    for path in (os.path.abspath(filename), os.path.realpath(filename)):
        for app_dir in _app_dirs:
            if path.startswith(app_dir + os.sep):
                return os.path.relpath(path, app_dir)
    return None


def keep_app_frames(report):
    """Drops every frame that is not the app's own (this harness, the standard library, installed
    packages) from `report` and the exceptions chained to it, and names the app's files relative to its
    folder: a traceback shows where the app failed, never the server's or the data dir's paths."""
    import traceback  # only when something failed

    pending, seen = [report], set()
    while pending:
        part = pending.pop()
        if part is None or id(part) in seen:
            continue
        seen.add(id(part))
        kept = traceback.StackSummary()
        for frame in part.stack:
            relative = app_path(frame.filename)
            if relative is None:
                continue
            frame.line  # read the source line while the absolute path still opens it
            frame.filename = relative
            kept.append(frame)
        part.stack = kept
        if getattr(part, "filename", None):  # a SyntaxError names the file it could not compile
            part.filename = app_path(part.filename) or os.path.basename(part.filename)
        pending.extend([part.__cause__, part.__context__, *(getattr(part, "exceptions", None) or [])])
    return report


def describe(error):
    """An exception as the server reports it: its type's name, its message (without the type: the
    server writes "Type: message" once) and a traceback of the app's frames only."""
    import traceback  # only when something failed

    return {
        "type": type(error).__name__,
        "message": str(error),
        "traceback": "".join(keep_app_frames(traceback.TracebackException.from_exception(error)).format()),
    }


def encode(value):
    """The JSON text of a value, or raises TypeError/ValueError when it is not JSON-serialisable."""
    return _encode_strict(value)


# A plain `def` (or `async def`): its code object says all inspect.signature would about its parameters.
_PLAIN_FUNCTION = type(lambda: None)
# Attributes that make inspect read a function otherwise than from its code (functools.wraps,
# an explicit signature, inspect.markcoroutinefunction).
_SIGNATURE_ATTRIBUTES = ("__wrapped__", "__signature__", "_is_coroutine_marker")
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_CO_COROUTINE = 0x80
_CO_ASYNC_GENERATOR = 0x200


class Function:
    """A public function of main.py, with what a call needs to know about it, worked out once.

    A plain function's parameters are read from its code object, which needs no import; anything else (a
    decorated or wrapped function, a partial, a callable object) is read with inspect, imported then.
    """

    def __init__(self, name, fn):
        self.name = name
        self.fn = fn
        # The common signature (named parameters only) is checked with two set operations; anything
        # else goes through Signature.bind.
        self.names = None
        self.required = None
        self._signature = None
        if not self.read_code():
            self.read_signature()
        self.wants_run_id = "run_id" in self.names if self.names is not None else (
            bool(self._signature) and "run_id" in self._signature.parameters)

    def read_code(self):
        """Reads a plain function's parameters as inspect would; False when it is not one."""
        fn = self.fn
        if type(fn) is not _PLAIN_FUNCTION or any(hasattr(fn, name) for name in _SIGNATURE_ATTRIBUTES):
            return False
        code = fn.__code__
        if code.co_posonlyargcount or code.co_flags & (_CO_VARARGS | _CO_VARKEYWORDS):
            return False
        positional = code.co_varnames[:code.co_argcount]
        keyword_only = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
        with_default = len(fn.__defaults__ or ())
        keyword_defaults = fn.__kwdefaults__ or {}
        self.is_async = bool(code.co_flags & (_CO_COROUTINE | _CO_ASYNC_GENERATOR))
        self.names = frozenset(positional + keyword_only)
        self.required = frozenset(positional[:len(positional) - with_default]) | frozenset(
            name for name in keyword_only if name not in keyword_defaults)
        return True

    def read_signature(self):
        import inspect  # only for functions whose code does not say it all

        fn = self.fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = False
            return
        parameters = self._signature.parameters
        kinds = {p.kind for p in parameters.values()}
        if kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
            self.names = frozenset(parameters)
            self.required = frozenset(n for n, p in parameters.items() if p.default is p.empty)

    def signature(self):
        """The function's inspect.Signature, or None when it has none."""
        if self._signature is None:
            import inspect

            try:
                self._signature = inspect.signature(self.fn)
            except (TypeError, ValueError):
                self._signature = False
        return self._signature or None

    def arguments_error(self, kwargs):
        """Why `kwargs` cannot be passed, or None when they can."""
        if self.names is not None:
            keys = kwargs.keys()
            if keys <= self.names and self.required <= keys:
                return None
        signature = self.signature()
        if signature is None:
            return None
        try:
            signature.bind(**kwargs)
        except TypeError as error:
            return f"{self.name}() {error}"
        return None


# A result of one of these exact types is a value as it is (no awaitable, no iterator): the common case
# is answered without importing inspect or collections.abc.
_PLAIN_VALUES = (dict, list, str, int, float, bool, type(None))


def result_kind(result):
    """How a function's result is answered: `awaitable`, `async_iterator`, `iterator` or `value`."""
    if type(result) in _PLAIN_VALUES:
        return "value"
    import collections.abc
    import inspect

    if inspect.isawaitable(result):
        return "awaitable"
    if isinstance(result, collections.abc.AsyncIterator):
        return "async_iterator"
    if isinstance(result, collections.abc.Iterator) and not isinstance(result, (str, bytes, dict, list)):
        return "iterator"
    return "value"


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
        import asyncio  # imported already: this runs on the loop

        while True:
            with self.condition:
                if self.has_room():
                    return
                if self.event is None:
                    self.event = asyncio.Event()
                self.event.clear()
                event = self.event
            await event.wait()


def send_fail(call_id, kind, error_type, message, channel=None):
    send({"op": "fail", "id": call_id, "kind": kind, "type": error_type, "message": message}, channel)


class Worker:
    def __init__(self, module, loop, concurrency):
        self.module = module
        self.loop = loop
        self.concurrency = concurrency
        self.cancelled = set()
        self.windows = {}
        self.tasks = {}
        self.functions = {}
        # Batched functions' batchers, by name, and the calls in their batches, by id.
        self.batchers = {}
        self.batch_members = {}
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
            entry = None if fn is None or not callable(fn) or isinstance(fn, type) else Function(name, fn)
            self.functions[name] = entry
        return entry

    def handle(self, message, channel=OWNER):
        """Called on the reader thread of `channel` for every request that came on it."""
        op = message.get("op")
        if op == "call":
            if channel is not OWNER:
                _call_channels[message["id"]] = channel
            self.start_call(message, channel)
        elif op == "credit":
            window = self.windows.get(message["id"])
            if window is not None:
                window.credit(int(message["items"]), int(message["bytes"]))
        elif op == "cancel":
            batched_call = self.batch_members.get(message["id"])
            if batched_call is not None:
                batched_call[0].cancel(batched_call[1])
                return
            self.cancelled.add(message["id"])
            window = self.windows.get(message["id"])
            if window is not None:
                window.close()
            # No loop yet means no task to cancel (a task is asked for before its cancel is read).
            self.loop.call_if_started(self.cancel_task, message["id"])

    def start_call(self, message, channel=OWNER):
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
        if name in _batch_specs:
            batcher = self.batchers.get(name)
            if batcher is None:
                batcher = self.batchers.setdefault(name, Batcher(self, function, _batch_specs[name]))
            batcher.add(call_id, kwargs, channel)
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
            if isinstance(job, BatchJob):
                self.run_batch(job.batcher, job.members)
            else:
                self.call_in_thread(*job)
            with self.pool_lock:
                self.idle += 1
            job = self.jobs.get()

    def call_in_thread(self, call_id, function, kwargs):
        token = _current_call.set((call_id, channel_of(call_id)))
        try:
            result = function.fn(**kwargs)
            kind = result_kind(result)
            if kind in ("awaitable", "async_iterator"):
                # A `def` that hands back a coroutine or an async iterator: finish it on the loop.
                self.loop.call_soon_threadsafe(self.start_task, call_id, self.finish_async(call_id, function, result))
                return
            if kind == "iterator":
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

    def run_batch(self, batcher, members):
        """Runs one batch on this pool thread: the function gets a list per parameter."""
        output = BatchOutput(members)
        token = _current_call.set(output)
        results, error = None, None
        try:
            results = batcher.function.fn(**batcher.arguments(members))
        except BaseException as failure:  # noqa: BLE001 - the function's failure is every call's failure
            error = describe(failure)
        finally:
            _current_call.reset(token)
        try:
            output.flush_partial()
            batcher.answer(members, results, error)
        finally:
            batcher.finished()

    def start_batch_task(self, batcher, members):
        import asyncio  # imported already: this runs on the loop

        asyncio.get_running_loop().create_task(self.batch_async(batcher, members))

    async def batch_async(self, batcher, members):
        """Runs one batch of an `async def` batched function on the loop."""
        output = BatchOutput(members)
        _current_call.set(output)
        results, error = None, None
        try:
            results = await batcher.function.fn(**batcher.arguments(members))
        except BaseException as failure:  # noqa: BLE001 - the function's failure is every call's failure
            error = describe(failure)
        try:
            output.flush_partial()
            batcher.answer(members, results, error)
        finally:
            batcher.finished()

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
        import asyncio  # imported already: this runs on the loop

        task = asyncio.get_running_loop().create_task(coroutine)
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
        _current_call.set((call_id, channel_of(call_id)))
        await self.guarded(call_id, function, lambda: function.fn(**kwargs))

    async def finish_async(self, call_id, function, result):
        _current_call.set((call_id, channel_of(call_id)))
        await self.guarded(call_id, function, lambda: result)

    async def guarded(self, call_id, function, start):
        import asyncio  # imported already: this runs on the loop

        try:
            result = start()
            kind = result_kind(result)
            if kind == "awaitable":
                result = await result
                kind = result_kind(result)
            if kind == "async_iterator":
                await self.stream_async(call_id, result)
            elif kind == "iterator":
                # An async function that returned a plain generator: iterate it off the loop.
                asyncio.current_task().runplane_async = False
                context = contextvars.copy_context()
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, context.run, self.stream_in_thread, call_id, result)
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
        import asyncio  # imported already: this runs on the loop

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
            channel_of(call_id, final=True).write(header.encode("ascii") + data)
            return
        # The result is already JSON text; splice it in so it is not encoded twice.
        line = encode_line('{"op":"result","id":' + _dumps(call_id) + ',"value":' + text + "}")
        channel_of(call_id, final=True).write(line)

    def send_item(self, call_id, value):
        try:
            text = value if isinstance(value, str) else encode(value)
        except (TypeError, ValueError) as error:
            raise TypeError(f"a yielded item is not JSON-serialisable: {error}") from None
        # The item's JSON text is spliced into the message so it is encoded once; a string item travels
        # as a JSON string and arrives as a string.
        value_json = _dumps(text) if isinstance(value, str) else text
        line = encode_line('{"op":"item","id":' + _dumps(call_id) + ',"value":' + value_json + "}")
        return channel_of(call_id).write(line)


# --- batched functions ([functions.<name>] batch in runplane.toml) ---------------------------------

# The batched functions, by name: (max_size, wait_ms), from --batch (the toml is the source of truth).
_batch_specs = {}


def batched(max_size=32, wait_ms=10):
    """`from runplane import batched`: marks a function as batched with these settings. The app's
    runplane.toml must say the same (`[functions.<name>] batch = { max_size = .., wait_ms = .. }`); a
    difference is a load error. The function is returned as it is."""

    def mark(fn):
        fn.__runplane_batch__ = (max_size, wait_ms)
        return fn

    return mark


def install_runplane_module():
    """Makes `import runplane` work in every replica: a tiny module with `batched`."""
    import types

    module = types.ModuleType("runplane", "Runplane's helpers for an app's main.py (batched).")
    module.batched = batched
    sys.modules.setdefault("runplane", module)


class BatchConfigError(Exception):
    """main.py does not fit its runplane.toml's [functions.<name>] batch."""


def check_batches(module):
    """Checks main.py against the batched functions the toml declares; raises BatchConfigError."""
    if _batch_specs:
        import inspect  # only for an app that batches: a plain call's replica never imports it
    for name, (max_size, wait_ms) in _batch_specs.items():
        fn = None if name.startswith("_") else getattr(module, name, None)
        if fn is None or not callable(fn) or isinstance(fn, type):
            raise BatchConfigError(f"runplane.toml's [functions.{name}] batch names no public function of main.py")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise BatchConfigError(f"{name}() is a generator; a generator cannot be batched ([functions.{name}] batch)")
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
            raise BatchConfigError(f"{name}() takes *args, **kwargs or positional-only parameters; a batched "
                                   "function takes named parameters only")
    for name in dir(module):
        mark = getattr(getattr(module, name, None), "__runplane_batch__", None)
        if mark is None or name.startswith("_"):
            continue
        declared = _batch_specs.get(name)
        if declared is None:
            raise BatchConfigError(f"{name}() is @batched but runplane.toml has no [functions.{name}] batch; the "
                                   "toml is the source of truth: add it there")
        if tuple(mark) != tuple(declared):
            raise BatchConfigError(
                f"{name}() is @batched(max_size={mark[0]}, wait_ms={mark[1]}) but runplane.toml says "
                f"max_size = {declared[0]}, wait_ms = {declared[1]}")


class Member:
    """One call waiting in (or running in) a batch."""

    __slots__ = ("call_id", "kwargs", "channel", "arrived", "answered")

    def __init__(self, call_id, kwargs, channel, arrived):
        self.call_id = call_id
        self.kwargs = kwargs
        self.channel = channel
        self.arrived = arrived
        # Set once its final message is decided (a result, a failure, or `cancelled`).
        self.answered = False


class BatchOutput:
    """What a batch's function prints: each whole line goes to every call of the batch still waiting for
    its answer, marked with the batch's size."""

    def __init__(self, members):
        self.members = members
        self.partial = {}
        self.lock = threading.Lock()

    def write(self, stream, text):
        with self.lock:
            lines = (self.partial.get(stream, "") + text).split("\n")
            self.partial[stream] = lines.pop()
        for line in lines:
            self.send(stream, line + "\n")

    def flush_partial(self):
        with self.lock:
            partial, self.partial = self.partial, {}
        for stream, text in partial.items():
            if text:
                self.send(stream, text + "\n")

    def send(self, stream, line):
        marked = f"[batch of {len(self.members)}] {line}"
        for member in self.members:
            if not member.answered:
                send({"op": "log", "id": member.call_id, "stream": stream, "text": marked}, member.channel)


class Batcher:
    """Groups the calls of one batched function: a batch leaves when it holds max_size calls, or wait_ms
    after its first call arrived, and only while fewer batches than the replica's concurrency run (a
    batch is one slot); until then it keeps filling. Calls beyond max_size wait for the next batch."""

    def __init__(self, worker, function, spec):
        import inspect
        import time

        self.worker = worker
        self.function = function
        self.max_size, self.wait_ms = spec
        self.clock = time.monotonic
        self.lock = threading.Lock()
        self.waiting = []
        self.running = 0
        self.timer = None
        self.parameters = [(p.name, p.default) for p in inspect.signature(function.fn).parameters.values()]

    def add(self, call_id, kwargs, channel):
        member = Member(call_id, kwargs, channel, self.clock())
        with self.lock:
            self.worker.batch_members[call_id] = (self, member)
            self.waiting.append(member)
            self.dispatch_locked()

    def cancel(self, member):
        """A cancelled call leaves a batch that has not started; once started, its answer is dropped."""
        with self.lock:
            if member.answered:
                return
            member.answered = True
            if member in self.waiting:
                self.waiting.remove(member)
            self.worker.batch_members.pop(member.call_id, None)
        send({"op": "cancelled", "id": member.call_id})

    def due(self):
        with self.lock:
            self.timer = None
            self.dispatch_locked()

    def dispatch_locked(self):
        while self.waiting and self.running < self.worker.concurrency:
            waited = (self.clock() - self.waiting[0].arrived) * 1000
            if len(self.waiting) < self.max_size and waited < self.wait_ms:
                if self.timer is None:
                    self.timer = threading.Timer((self.wait_ms - waited) / 1000, self.due)
                    self.timer.daemon = True
                    self.timer.start()
                return
            members, self.waiting = self.waiting[:self.max_size], self.waiting[self.max_size:]
            self.running += 1
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            send({"op": "batch", "fn": self.function.name, "size": len(members),
                  "wait_ms": round((self.clock() - members[0].arrived) * 1000, 3)}, OWNER)
            if self.function.is_async:
                self.worker.loop.call_soon_threadsafe(self.worker.start_batch_task, self, members)
            else:
                self.worker.submit(BatchJob(self, members))

    def finished(self):
        with self.lock:
            self.running -= 1
            self.dispatch_locked()

    def arguments(self, members):
        """One list per parameter, element i for call i, its default where call i left it out."""
        return {name: [m.kwargs.get(name, default) for m in members] for name, default in self.parameters}

    def answer(self, members, results, error):
        """Sends each call of a finished batch its element, or the batch's failure."""
        if error is None:
            count = len(results) if isinstance(results, (list, tuple)) else None
            if count != len(members):
                what = f"a list of {count}" if count is not None else f"a {type(results).__name__}"
                error = ("bad_batch_result", "TypeError",
                         f"{self.function.name}() is batched: it must return a list with one result per call "
                         f"({len(members)}), but returned {what}")
        for index, member in enumerate(members):
            with self.lock:
                if member.answered:
                    continue
                member.answered = True
                self.worker.batch_members.pop(member.call_id, None)
            call_id = member.call_id
            try:
                if error is None:
                    self.worker.send_result(call_id, self.function, results[index])
                elif isinstance(error, tuple):
                    send_fail(call_id, *error)
                else:
                    send({"op": "fail", "id": call_id, "kind": "exception", **error})
            except TooLarge as too_large:
                send_fail(call_id, "too_large", "ValueError",
                          f"{self.function.name}() produced a value too large to send: {too_large}")


class BatchJob:
    """A batch to run on a pool thread."""

    __slots__ = ("batcher", "members")

    def __init__(self, batcher, members):
        self.batcher = batcher
        self.members = members


def close_iterator(iterator):
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def handle_line(worker, line, channel=OWNER):
    """Handles one request; a request that cannot be read fails its call alone, never the reader."""
    try:
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("a request must be a JSON object")
        worker.handle(message, channel)
    except Exception as error:  # noqa: BLE001 - RecursionError, ValueError, KeyError, MemoryError, ...
        match = _LEADING_ID.match(line)
        if match is None:
            _real_stderr.write(f"runplane worker: ignored an unreadable request: {type(error).__name__}: {error}\n")
            return
        call_id = json.loads(match.group(1))
        _call_channels.pop(call_id, None)
        send_fail(call_id, "bad_request", type(error).__name__,
                  f"the worker could not read the call: {type(error).__name__}: {error}", channel)


def read_requests(worker, channel=OWNER):
    with os.fdopen(channel.read_fd, "rb", buffering=0, closefd=False) as pipe:
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
                    handle_line(worker, line, channel)
                start = newline + 1
    if channel is OWNER:
        # The server went away: leave no orphan behind.
        os._exit(0)
    # A front-door process went away: the calls it made are stopped, as its own reader would have asked.
    channel.close()
    for call_id, owner in list(_call_channels.items()):
        if owner is channel:
            worker.handle({"op": "cancel", "id": call_id}, channel)


def load_module(app_dir, preload=()):
    sys.path.insert(0, app_dir)
    os.chdir(app_dir)
    for name in preload:
        importlib.import_module(name)
    spec = importlib.util.spec_from_file_location("main", os.path.join(app_dir, "main.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["main"] = module
    spec.loader.exec_module(module)
    return module


def parse_args(argv):
    app_dir, concurrency = argv[1], int(argv[2])
    preload = []
    channels = []
    template = False
    unjailed = False
    network_fd = None
    for arg in argv[3:]:
        if arg.startswith("--channels="):
            channels = [int(fd) for fd in arg[len("--channels="):].split(",") if fd]
        elif arg.startswith("--network-fd="):
            network_fd = int(arg[len("--network-fd="):])
        elif arg == "--template":
            template = True
        elif arg == "--unjailed":
            unjailed = True
        elif arg.startswith("--batch="):
            _batch_specs.update({name: tuple(spec) for name, spec in json.loads(arg[len("--batch="):]).items()})
        elif arg.startswith("--preload="):
            preload = [name for name in arg[len("--preload="):].split(",") if name]
    return app_dir, concurrency, preload, template, unjailed, channels, network_fd


def wait_for_network(fd):
    """Waits for the server's word that the jail's network is in (`x` on this pipe, then its end): the
    interpreter and these imports ran while it was attached; the preload and main.py may need it. Without
    the word the server could not set the network up, and stops this process's group itself."""
    try:
        word = os.read(fd, 1)
    finally:
        os.close(fd)
    if word != b"x":
        os._exit(3)


def load_or_exit(app_dir, preload):
    global _app_dirs
    _app_dirs = tuple(dict.fromkeys([os.path.abspath(app_dir), os.path.realpath(app_dir)]))
    sys.stdout = RunOutput("stdout", _real_stdout)
    sys.stderr = RunOutput("stderr", _real_stderr)
    try:
        install_runplane_module()
        module = load_module(app_dir, preload)
        check_batches(module)
        return module
    except BaseException as error:  # noqa: BLE001 - reported to the server as the app's load error
        send({"op": "load_error", **describe(error)})
        _real_stderr.flush()
        os._exit(3)


class LazyLoop:
    """The asyncio loop that `async def` functions run on, on the main thread, started at its first use:
    a worker whose calls are all plain `def` never imports asyncio (about 40 ms of a cold start)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.loop = None
        # Callbacks asked for before the loop ran, in order; None once it runs.
        self.pending = []
        self.wanted = threading.Event()

    def call_soon_threadsafe(self, callback, *args):
        """Runs `callback(*args)` on the loop, starting it first if need be (from any thread)."""
        with self.lock:
            if self.loop is None:
                self.pending.append((callback, args))
                self.wanted.set()
                return
        self.loop.call_soon_threadsafe(callback, *args)

    def call_if_started(self, callback, *args):
        """`call_soon_threadsafe`, but nothing when nothing ever asked for the loop."""
        with self.lock:
            if self.loop is None and not self.pending:
                return
        self.call_soon_threadsafe(callback, *args)

    def run_forever(self):
        """Waits for the first use, then runs the loop (on the calling thread, the main one) for good."""
        self.wanted.wait()
        import asyncio

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        with self.lock:
            for callback, args in self.pending:
                loop.call_soon(callback, *args)
            self.pending = None
            self.loop = loop
        loop.run_forever()


def serve(module, concurrency, channel_fds=()):
    """Serves calls on the server's channel and on each extra channel's socket (`channel_fds`)."""
    loop = LazyLoop()
    worker = Worker(module, loop, concurrency)
    for channel in [OWNER, *(Channel(fd, fd) for fd in channel_fds)]:
        threading.Thread(target=read_requests, args=(worker, channel), daemon=True).start()
    send({"op": "ready", "pid": os.getpid()})
    loop.run_forever()


# --- the template ----------------------------------------------------------------------------------


def os_threads():
    """Threads of this process as the kernel counts them (C libraries' own included), or None."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def fork_problem():
    """Why forking this process would copy a broken state, or None when a fork is sound."""
    python_threads = threading.active_count()
    if python_threads > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        return f"it runs {python_threads - 1} thread(s) besides the main one after import ({names})"
    threads = os_threads()
    if threads is not None and threads > 1:
        return f"a library started {threads - 1} native thread(s) at import"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    initialised = getattr(cuda, "is_initialized", None)
    if initialised is not None:
        try:
            if initialised():
                return "it initialised CUDA at import (torch.cuda)"
        except Exception:  # noqa: BLE001 - a broken check is a reason not to fork
            return "torch.cuda.is_initialized() failed"
    return None


def exit_reason(status):
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def read_line_byte_by_byte(fd):
    """One line from fd, reading nothing past its newline (what follows belongs to someone else)."""
    data = bytearray()
    while not data.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            os._exit(0)
        data += byte
    return bytes(data)


def reseed():
    # Not imported: it seeds itself, from os.urandom, when the replica imports it.
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    numpy = sys.modules.get("numpy")
    seed = getattr(getattr(numpy, "random", None), "seed", None)
    if seed is not None:
        seed()


def death_signal(unjailed):
    """libc's prctl, loaded once by an unjailed template for its forks (`die_with_parent`); None when jailed,
    where the jail's pid namespace ends the forks with their template, and ctypes is not worth loading."""
    if not unjailed:
        return None
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:  # noqa: BLE001 - best effort: the socket's end still stops it
        return None


def die_with_parent(prctl):
    """Unjailed, nothing else ends a forked replica when its template dies (jailed, its pid namespace does)."""
    if prctl is not None:
        try:
            prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - best effort: the socket's end still stops it
            pass
    if os.getppid() == 1:
        os._exit(0)


def run_forked(module, concurrency, request, prctl):
    """The forked replica: a fresh process of its own group, its own seeds, then a worker on the socket."""
    import socket  # imported by the template before it forks (template_main)

    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(REQUESTS_FD)
        os.close(MESSAGES_FD)
        die_with_parent(prctl)
        os.environ.update(request.get("env") or {})
        reseed()
        # Two connections, as a cold worker has two pipes: closing one is seen alone; then one per extra
        # channel (see Channel).
        fds = []
        extra = [f"c{index}" for index in range(int(request.get("channels") or 0))]
        for channel in ("requests", "messages", *extra):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(request["socket"])
            hello = {"op": "hello", "id": request["id"], "pid": os.getpid(), "channel": channel}
            connection.sendall((_dumps(hello) + "\n").encode())
            # Kept above fd 4, so that placing one on fd 3 or 4 never closes the other.
            raw = connection.detach()
            fds.append(os.dup2(raw, 10 + len(fds)))
            if raw != fds[-1]:
                os.close(raw)
        for fd, target in zip(fds, (REQUESTS_FD, MESSAGES_FD)):
            os.dup2(fd, target)
            os.close(fd)
        read_line_byte_by_byte(REQUESTS_FD)
        serve(module, concurrency, fds[2:])
    except BaseException:  # noqa: BLE001 - a replica that cannot start must not return into the template
        import traceback

        traceback.print_exc(file=_real_stderr)
    finally:
        os._exit(70)


def template_main(module, concurrency, unjailed):
    import socket  # noqa: F401 - once here rather than in every fork (run_forked)

    prctl = death_signal(unjailed)

    problem = fork_problem()
    send({"op": "template", "pid": os.getpid(), "unsafe": problem})
    if problem is not None:
        os._exit(0)
    children = set()
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        ready, _, _ = select.select([REQUESTS_FD, wakeup_read], [], [])
        if wakeup_read in ready:
            os.read(wakeup_read, 4096)
            reap(children)
        if REQUESTS_FD not in ready:
            continue
        chunk = os.read(REQUESTS_FD, 65536)
        if not chunk:
            # The server went away (or stops the template): forked replicas go with it.
            for pid in children:
                kill_group(pid)
            os._exit(0)
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            request = json.loads(line)
            if request["op"] == "fork":
                pid = os.fork()
                if pid == 0:
                    run_forked(module, concurrency, request, prctl)
                children.add(pid)
                send({"op": "forked", "id": request["id"], "pid": pid})
            elif request["op"] == "kill" and request["pid"] in children:
                kill_group(request["pid"])


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def reap(children):
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            children.discard(pid)
            # What the replica left behind in its group goes with it.
            kill_group(pid)
            send({"op": "exited", "pid": pid, "reason": exit_reason(status)})


def main():
    app_dir, concurrency, preload, template, unjailed, channels, network_fd = parse_args(sys.argv)
    if network_fd is not None:
        wait_for_network(network_fd)
    module = load_or_exit(app_dir, preload)
    if template:
        template_main(module, concurrency, unjailed)
    else:
        serve(module, concurrency, channels)


if __name__ == "__main__":
    main()

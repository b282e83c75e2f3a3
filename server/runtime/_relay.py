"""The custom runtime's relay: the one way the server reaches an app's own HTTP server.

Usage: _relay.py SOCKET_DIR PORT PARENT_PID -- ENTRYPOINT...

Runs beside the app in its sandbox. It starts the entrypoint (with PORT set by the server), then accepts
the server's connections on SOCKET_DIR/http.sock and copies each to 127.0.0.1:PORT and back: the app
listens on a port of its own network namespace, which the server cannot reach, and the server hands in
nothing but that folder. SOCKET_DIR/probe.sock answers one byte per connection, b"1" when the app's port
accepts a connection and b"0" otherwise (the health check of apps without a health endpoint).

The server stops the app by closing fd 3: the relay sends the app SIGTERM and exits with it. With
PARENT_PID > 0 (no sandbox, which would kill it with the server) the relay asks the kernel for SIGKILL
when the server dies (PR_SET_PDEATHSIG) and passes that on to the app's process group.
"""
import asyncio
import ctypes
import os
import signal
import socket
import sys

CONTROL_FD = 3
CHUNK = 256 * 1024


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def relay(port: int, client_reader, client_writer) -> None:
    try:
        app_reader, app_writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        client_writer.close()
        return
    for sock in (client_writer.get_extra_info("socket"), app_writer.get_extra_info("socket")):
        if sock is not None and sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.gather(pump(client_reader, app_writer), pump(app_reader, client_writer))
    app_writer.close()
    client_writer.close()


async def probe(port: int, _reader, writer) -> None:
    try:
        _, app_writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        app_writer.close()
        writer.write(b"1")
    except (OSError, asyncio.TimeoutError):
        writer.write(b"0")
    await writer.drain()
    writer.close()


async def main() -> int:
    socket_dir, port, parent_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    command = sys.argv[5:]
    if parent_pid > 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent_pid:
            return 1
    def die_with_relay() -> None:
        if parent_pid > 0:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)

    app = await asyncio.create_subprocess_exec(*command, preexec_fn=die_with_relay)
    loop = asyncio.get_running_loop()
    servers = [
        await asyncio.start_unix_server(lambda r, w: relay(port, r, w), os.path.join(socket_dir, "http.sock")),
        await asyncio.start_unix_server(lambda r, w: probe(port, r, w), os.path.join(socket_dir, "probe.sock")),
    ]

    def stop() -> None:
        loop.remove_reader(CONTROL_FD)
        if app.returncode is None:
            app.send_signal(signal.SIGTERM)

    loop.add_reader(CONTROL_FD, stop)
    code = await app.wait()
    for server in servers:
        server.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""A chat room over WebSockets: every text message a member sends goes to every member, as
`{"from": <member>, "text": <text>, "members": <count>}`; a member joining or leaving is announced the
same way (from "room"). GET /health answers 200 for Runplane's health check.

It speaks RFC 6455 with Python's standard library only (the replica's jail has no WebSocket package):
unfragmented text messages, pings answered, close frames echoed. Listens on 127.0.0.1:$PORT, as a custom
runtime must. Runplane in front of it authenticates callers, records each connection as a run and closes
it with 1001 when it drains."""
import asyncio
import base64
import hashlib
import itertools
import json
import os
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 64 * 1024
members = {}
numbers = itertools.count(1)


def frame(op, data):
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x80 | op, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | op, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | op, 127, n)
    return head + data


def unmask(data, mask):
    key = (mask * (len(data) // 4 + 1))[: len(data)]
    return bytes(a ^ b for a, b in zip(data, key))


async def read_frame(reader):
    b1, b2 = await reader.readexactly(2)
    n = b2 & 0x7F
    if n == 126:
        n = struct.unpack("!H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await reader.readexactly(8))[0]
    if n > MAX_MESSAGE:
        raise ValueError("message too large")
    mask = await reader.readexactly(4) if b2 & 0x80 else None
    data = await reader.readexactly(n)
    return b1 & 0x0F, unmask(data, mask) if mask else data


async def read_request(reader):
    request = await reader.readuntil(b"\r\n\r\n")
    lines = request.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def broadcast(sender, text):
    message = frame(1, json.dumps({"from": sender, "text": text, "members": len(members)}).encode())
    for writer in members.values():
        writer.write(message)


async def chat(member, reader, writer):
    members[member] = writer
    broadcast("room", f"{member} joined")
    try:
        while True:
            op, data = await read_frame(reader)
            if op == 8:
                writer.write(frame(8, data[:2] or struct.pack("!H", 1000)))
                break
            if op == 9:
                writer.write(frame(10, data))
            elif op == 1:
                broadcast(member, data.decode("utf-8", "replace"))
            await writer.drain()
    finally:
        del members[member]
        broadcast("room", f"{member} left")


async def handle(reader, writer):
    try:
        line, headers = await read_request(reader)
        if headers.get("upgrade", "").lower() != "websocket":
            status = "200 OK" if line.startswith("GET /health ") else "404 Not Found"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            return
        key = headers["sec-websocket-key"].encode()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
        await chat(f"member-{next(numbers)}", reader, writer)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError, KeyError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(os.environ["PORT"]))
    async with server:
        await server.serve_forever()


asyncio.run(main())

"""The WebSocket benchmark's echo server: RFC 6455 in Python's standard library (the jail has no WebSocket
package), enough for the benchmark's client: it echoes text and binary messages (unfragmented), answers
pings and echoes a close frame. Listens on 127.0.0.1:$PORT, as a custom runtime must."""
import asyncio, base64, hashlib, os, struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


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
    if not data:
        return data
    key = (mask * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(len(data), "big")


async def read_frame(reader):
    b1, b2 = await reader.readexactly(2)
    n = b2 & 0x7F
    if n == 126:
        n = struct.unpack("!H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await reader.readexactly(8))[0]
    mask = await reader.readexactly(4) if b2 & 0x80 else None
    data = await reader.readexactly(n)
    return b1 & 0x0F, unmask(data, mask) if mask else data


async def handshake(reader, writer):
    request = await reader.readuntil(b"\r\n\r\n")
    headers = {}
    for line in request.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("upgrade", "").lower() != "websocket":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        return False
    accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest()).decode()
    writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
    return True


async def handle(reader, writer):
    try:
        if not await handshake(reader, writer):
            await writer.drain()
            writer.close()
            return
        while True:
            op, data = await read_frame(reader)
            if op == 8:
                writer.write(frame(8, data))
                await writer.drain()
                break
            if op == 9:
                writer.write(frame(10, data))
            elif op in (1, 2):
                writer.write(frame(op, data))
            # Drain only when the kernel's buffer is full: a pipelining client's echoes go out in batches.
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(os.environ["PORT"]), limit=1 << 20, backlog=1024)
    async with server:
        await server.serve_forever()


asyncio.run(main())

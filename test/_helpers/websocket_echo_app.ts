/**
 * The custom runtime the WebSocket tests deploy: a minimal RFC 6455 server in Python's standard library
 * (the jailed app has no WebSocket package), test code only — Runplane's side uses `ws`. It greets with
 * the request's path and `X-Request-Id`, echoes text and binary messages, answers pings, echoes a close
 * frame, and takes text commands `cmd:…` (close with a code, ping the caller, flood, one big message,
 * its pid).
 */
export const WEBSOCKET_ECHO_APP = String.raw`
import asyncio, base64, hashlib, json, os, struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def frame(op, data):
    n = len(data)
    head = bytes([0x80 | op])
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
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
    return bool(b1 & 0x80), b1 & 0x0F, unmask(data, mask) if mask else data

async def command(text, writer):
    name, _, rest = text.partition(":")
    if name == "close":
        code, _, reason = rest.partition(":")
        writer.write(frame(8, struct.pack("!H", int(code)) + reason.encode()))
        return True
    if name == "ping":
        writer.write(frame(9, rest.encode()))
    elif name == "flood":
        count, size = (int(v) for v in rest.split(":"))
        for i in range(count):
            writer.write(frame(2, bytes([i % 256]) * size))
            await writer.drain()
        writer.write(frame(1, b"flood done"))
    elif name == "big":
        writer.write(frame(2, b"x" * int(rest)))
    elif name == "pid":
        start = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
        writer.write(frame(1, f"pid:{os.getpid()}:{start}".encode()))
    await writer.drain()
    return False

async def handle(reader, writer):
    try:
        request = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    lines = request.decode("latin-1").split("\r\n")
    target = lines[0].split(" ")[1]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("upgrade", "").lower() != "websocket" or target.startswith("/refuse"):
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        return
    accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest()).decode()
    chosen = ""
    if headers.get("sec-websocket-protocol"):
        chosen = "Sec-WebSocket-Protocol: " + headers["sec-websocket-protocol"].split(",")[0].strip() + "\r\n"
    writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept}\r\n{chosen}\r\n").encode())
    greeting = {"path": target, "request_id": headers.get("x-request-id"), "headers": sorted(headers)}
    writer.write(frame(1, json.dumps(greeting).encode()))
    await writer.drain()
    closing = False
    parts, kind = [], 1
    while True:
        try:
            fin, op, data = await read_frame(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            break
        if op == 8:
            if not closing:
                writer.write(frame(8, data))
                await writer.drain()
            break
        if op == 9:
            writer.write(frame(10, data))
            await writer.drain()
            continue
        if op == 10:
            writer.write(frame(1, b"pong:" + data))
            await writer.drain()
            continue
        if op in (1, 2):
            kind, parts = op, [data]
        else:
            parts.append(data)
        if not fin:
            continue
        message = b"".join(parts)
        if kind == 1 and message.startswith(b"cmd:"):
            closing = await command(message[4:].decode(), writer) or closing
            continue
        writer.write(frame(kind, message))
        await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(os.environ["PORT"]), limit=1 << 20)
    async with server:
        await server.serve_forever()

asyncio.run(main())
`;

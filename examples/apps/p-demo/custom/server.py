"""A custom-runtime example: any HTTP server listening on $PORT (standard library only).

POST /echo answers JSON; POST /events answers server-sent events; GET /health is the health check.
"""
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, "application/json", b'{"ok": true}')
        else:
            self.answer(404, "application/json", b'{"error": "not found"}')

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path in ("/run", "/echo"):  # run is the default function name
            result = {"echo": body, "pid": os.getpid(), "request_id": self.headers.get("X-Request-Id")}
            self.answer(200, "application/json", json.dumps(result).encode())
        elif self.path == "/events":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(int(body.get("count", 3))):
                self.wfile.write(f"data: event {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(float(body.get("delay", 0.2)))
            self.wfile.write(b"event: done\ndata: line one\ndata: line two\n\n")
            self.wfile.flush()
            self.close_connection = True
        else:
            self.answer(404, "application/json", b'{"error": "no such path"}')

    def answer(self, status, content_type, data):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        print(format % args, flush=True)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()

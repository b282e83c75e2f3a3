/**
 * A custom runtime's relay listens on Unix sockets in a folder the project's processes could write while it
 * starts; the root server connects to them. An app that swaps them for links to a host socket must not make
 * the server connect there (issue 43: the server never follows a tenant's path).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Swaps the relay's sockets for links to `HOST_SOCKET` for a while, then serves as an honest app would. */
const SWAPPER = `
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

relay = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
folder = relay[2].decode()
swapped = 0
end = time.time() + 3
while time.time() < end:
    for name in ("http.sock", "probe.sock"):
        path = os.path.join(folder, name)
        try:
            if not os.path.islink(path):
                os.unlink(path)
                os.symlink(os.environ["HOST_SOCKET"], path)
                swapped += 1
        except OSError:
            pass
    time.sleep(0.005)

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        answer = b'{"app": "honest"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

if (await sandboxWorks("the socket link attack test")) {
  describe("a custom runtime that swaps its relay's sockets for links", () => {
    let t: TestServer;
    let root: string;
    let hostSocket: Server;
    let connections = 0;

    before(async () => {
      root = await mkdtemp(join(tmpdir(), "runplane-socket-link-"));
      const path = join(root, "host.sock");
      hostSocket = createServer((socket) => {
        connections++;
        socket.end("1");
      });
      await new Promise<void>((resolve) => hostSocket.listen(path, resolve));
      t = await startTestServer();
      await deployApp(t, "swapper", {
        toml: `[deployment]\nruntime = "custom"\n\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n`
          + `\n[env]\nHOST_SOCKET = ${JSON.stringify(path)}\n`,
        files: { "server.py": SWAPPER },
      });
    });
    after(async () => {
      await t?.close();
      hostSocket?.close();
      await rm(root, { recursive: true, force: true });
    });

    it("never makes the server connect to the host socket the links name", async () => {
      for (let i = 0; i < 3; i++) {
        const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/swapper/run`, {
          method: "POST",
          headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
          body: "{}",
        });
        const text = await response.text();
        // Either the honest app answered (its sockets were sealed before it could swap them), or the
        // replica was refused; never the host socket.
        if (response.status === 200) assert.deepEqual(JSON.parse(text).result, { app: "honest" });
      }
      assert.equal(connections, 0, "the server connected to a host socket through the app's link");
    });
  });
}

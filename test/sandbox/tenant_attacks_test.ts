/**
 * A hostile tenant's attacks, each tried by real apps against a real server: the Python runtime and the
 * custom runtime, from the apps folder and deployed. Every one of them succeeded before the sandbox.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { deployApp, writeApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { type PeerHost, sandboxWorks, startPeerHost } from "../_helpers/sandbox.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";

/** The attacks, in Python: each is tried and reported, so one refused attack does not hide the next. */
const PROBE = `
import os, socket

def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}

def read(path):
    with open(path, "rb") as f:
        return f.read(300).decode("latin1")

def write(path):
    with open(path, "w") as f:
        f.write("pwned")
    return "written"

def connect(host, port):
    s = socket.create_connection((host, port), timeout=3)
    data = s.recv(100).decode()
    s.close()
    return data or "connected"

def probe(reads=(), writes=(), lists=(), connects=()):
    return {
        "uid": os.getuid(),
        "env": dict(os.environ),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "reads": {p: attempt(lambda p=p: read(p)) for p in reads},
        "writes": {p: attempt(lambda p=p: write(p)) for p in writes},
        "lists": {p: attempt(lambda p=p: os.listdir(p)) for p in lists},
        "connects": {f"{h}:{p}": attempt(lambda h=h, p=p: connect(h, p)) for h, p in connects},
    }
`;

const PYTHON_APP = {
  "runplane.toml": '[deployment]\nruntime = "python"\n',
  "probe.py": PROBE,
  "main.py": "import probe as _probe\n\ndef run(**attacks):\n    return _probe.probe(**attacks)\n",
};

const CUSTOM_APP = {
  "runplane.toml": '[deployment]\nruntime = "custom"\n\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n',
  "probe.py": PROBE,
  "server.py": `
import json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import probe

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        answer = json.dumps(probe.probe(**body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`,
};

interface Attempt {
  ok: boolean;
  value?: unknown;
  error?: string;
}

interface ProbeResult {
  uid: number;
  env: Record<string, string>;
  pids: number[];
  reads: Record<string, Attempt>;
  writes: Record<string, Attempt>;
  lists: Record<string, Attempt>;
  connects: Record<string, Attempt>;
}

const CANARY = `canary-${process.pid}-${Date.now()}`;

if (await sandboxWorks("the tenant attack tests")) {
  describe("a hostile tenant's code is jailed", () => {
    let t: TestServer;
    let peer: PeerHost | null;
    let hostListener: Server;
    let hostPort = 0;
    let hostConnections = 0;
    let otherAppDir: string;
    let deployToken: string;
    const saved: Record<string, string | undefined> = {};

    before(async () => {
      // What the operator's shell holds: none of it may reach tenants' code.
      for (const name of ["RUNPLANE_MASTER_KEY", "RUNPLANE_DATABASE_URL", "OPERATOR_SHELL_SECRET"]) {
        saved[name] = process.env[name];
        process.env[name] = `${CANARY}-${name}`;
      }
      peer = await startPeerHost("the egress tests");
      hostListener = createServer((socket) => {
        hostConnections++;
        socket.end("host-secret");
      });
      await new Promise<void>((resolve) => hostListener.listen(0, "127.0.0.1", resolve));
      hostPort = (hostListener.address() as { port: number }).port;
      t = await startTestServer();
      deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
      otherAppDir = await writeApp(t.server.context.config.appsDir, "victim", {
        project: "p-other",
        files: { "runplane.toml": "[deployment]\n", "main.py": "def run():\n    return 'victim'\n" },
      });
      await deployApp(t, "py", { toml: PYTHON_APP["runplane.toml"], files: PYTHON_APP });
      await deployApp(t, "custom", { toml: CUSTOM_APP["runplane.toml"], files: CUSTOM_APP });
    });
    after(async () => {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
      await t?.close();
      peer?.close();
      hostListener?.close();
    });

    function attacks() {
      const { dataDir } = t;
      return {
        reads: [
          join(dataDir, "keys", "signing_key.jwk.json"),
          join(dataDir, "keys", "secret_box.key"),
          join(dataDir, "runplane.sqlite3"),
          join(otherAppDir, "main.py"),
          `/proc/${process.pid}/environ`,
          "/proc/1/environ",
        ],
        writes: [
          join(otherAppDir, "main.py"),
          join(dataDir, "pwned"),
          join(dataDir, "apps", "p-test", "py", "main.py"),
        ],
        lists: [dataDir, join(dataDir, "deployments"), "/root"],
        connects: [
          ["127.0.0.1", hostPort],
          ["127.0.0.1", 5432],
          ["10.0.2.2", hostPort],
          ...(peer ? [[peer.privateAddress, peer.port], [peer.publicAddress, peer.port]] : []),
        ],
      };
    }

    async function probe(app: string, options: { token?: string } = {}): Promise<ProbeResult> {
      const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/${app}/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${options.token ?? t.token}`, "Content-Type": "application/json" },
        body: JSON.stringify(attacks()),
      });
      const text = await response.text();
      assert.equal(response.status, 200, text);
      return (JSON.parse(text) as { result: ProbeResult }).result;
    }

    function assertJailed(result: ProbeResult, app: string): void {
      for (const [name, value] of Object.entries(result.env)) {
        assert.ok(!name.startsWith("RUNPLANE_"), `${app} sees ${name}`);
        assert.ok(!value.includes(CANARY), `${app} sees the server's ${name}`);
      }
      assert.equal(result.env.OPERATOR_SHELL_SECRET, undefined, `${app} sees the operator's shell`);
      assert.ok(!result.pids.includes(process.pid) || process.pid < 10, `${app} sees the server's process`);
      assert.ok(result.pids.length < 10, `${app} sees host processes: ${result.pids.length}`);
      for (const kind of ["reads", "writes"] as const) {
        for (const [path, attempt] of Object.entries(result[kind])) {
          assert.equal(attempt.ok, false, `${app} ${kind} ${path}: ${JSON.stringify(attempt.value)}`);
        }
      }
      // The folders above its own are bare skeletons: each names the one folder on the way, nothing else.
      for (const [path, attempt] of Object.entries(result.lists)) {
        const names = attempt.ok ? (attempt.value as string[]) : [];
        assert.ok(names.length <= 1, `${app} lists ${path}: ${JSON.stringify(names)}`);
        assert.ok(
          !names.some((n) =>
            ["keys", "runplane.sqlite3", "venvs", "p-other", "bundles", "unpacked", "supervisor.sock"].includes(n)
          ),
          `${app} lists ${path}`,
        );
      }
      assertEgress(result.connects, app);
      if (process.getuid?.() === 0) assert.notEqual(result.uid, 0, `${app} runs as root`);
    }

    /** Of `connects`' targets, `app` reached the peer's public address alone (where there is a peer). */
    function assertEgress(connects: ProbeResult["connects"], app: string): void {
      for (const [target, attempt] of Object.entries(connects)) {
        const reachable = peer !== null && target === `${peer.publicAddress}:${peer.port}`;
        assert.equal(attempt.ok, reachable, `${app} connects to ${target}: ${JSON.stringify(attempt)}`);
        if (reachable) assert.equal(attempt.value, "peer");
      }
    }

    it("a Python app of the apps folder reads no secret, no other project and no host service", async () => {
      assertJailed(await probe("py"), "py");
    });

    it("a custom runtime of the apps folder is jailed the same way", async () => {
      assertJailed(await probe("custom"), "custom");
    });

    it("deployed Python and custom apps are jailed the same way", async () => {
      for (const [name, files] of [["dpy", PYTHON_APP], ["dcustom", CUSTOM_APP]] as const) {
        const end = await deployBundle(t, name, await bundleOf(files), deployToken);
        assert.equal(end.status, "ready", end.error ?? "");
        assertJailed(await probe(name), name);
      }
    });

    it("main.py has its network while it is imported, as blocked as ever: the harness waits for it", async () => {
      // The interpreter and the harness start while the jail's network is attached; main.py must not.
      const main =
        `import probe as _probe\n\nAT_IMPORT = _probe.probe(connects=${JSON.stringify(attacks().connects)})\n\n`
        + "def run(**attacks):\n    return AT_IMPORT\n";
      await deployApp(t, "importing", { toml: PYTHON_APP["runplane.toml"], files: { ...PYTHON_APP, "main.py": main } });
      const result = await probe("importing");
      assertEgress(result.connects, "importing");
      assert.equal(Object.keys(result.connects).length, attacks().connects.length);
    });

    it("an app with [network] egress = false reaches no address at all, and sees its own [env]", async () => {
      const toml = '[deployment]\nruntime = "python"\n\n[network]\negress = false\n\n[env]\nGREETING = "hi"\n';
      await deployApp(t, "closed", { toml, files: PYTHON_APP });
      const result = await probe("closed");
      assert.equal(result.env.GREETING, "hi");
      for (const [target, attempt] of Object.entries(result.connects)) {
        assert.equal(attempt.ok, false, `closed connects to ${target}: ${JSON.stringify(attempt)}`);
      }
      assert.ok(peer === null || `${peer.publicAddress}:${peer.port}` in result.connects);
    });

    it("no connection of any app reached the host's own listener", () => {
      assert.equal(hostConnections, 0);
    });

    it("a build step prints neither the server's environment nor the key files, and writes nothing outside its folder", async () => {
      const key = join(t.dataDir, "keys", "signing_key.jwk.json");
      const commands = [
        "env || true",
        "tr '\\0' '\\n' < /proc/$PPID/environ || true",
        "tr '\\0' '\\n' < /proc/1/environ || true",
        `cat ${key} || true`,
        `cat ../../keys/signing_key.jwk.json || true`,
        `ls ${t.dataDir} || true`,
        `echo pwned > ${join(t.dataDir, "pwned")} || true`,
        "echo built > built.txt",
      ];
      const toml = `[deployment]\n\n[build]\nshell_commands = ${JSON.stringify(commands)}\n`;
      const end = await deployBundle(
        t,
        "builder",
        await bundleOf({ "runplane.toml": toml, "main.py": "def run():\n    return open('built.txt').read()\n" }),
        deployToken,
      );
      const log = end.lines.join("\n");
      const problems = t.logs.filter((l) => (l.level as number) >= 50).map((l) => JSON.stringify(l)).join("\n");
      assert.equal(end.status, "ready", `${end.error}\n${log}\n${problems}`);
      const privateKey = (JSON.parse(await readFile(key, "utf8")) as { d: string }).d;
      assert.ok(!log.includes(privateKey), "the build log holds the private signing key");
      assert.ok(!log.includes(CANARY), "the build log holds the server's environment");
      assert.ok(!log.includes("runplane.sqlite3"), "the build listed the data dir");
      await assert.rejects(readFile(join(t.dataDir, "pwned")));
      const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/builder/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      assert.equal(((await response.json()) as { result: string }).result, "built\n");
    });
  });
}

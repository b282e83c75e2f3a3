/**
 * Apps whose image is built from their bundle's Dockerfile (`[runtime.custom] dockerfile`), end to end on a
 * real server: the FROM image (Debian trixie with Python 3.13) pulled from a registry of the test's own on
 * loopback, every RUN, COPY and WORKDIR run in Runplane's jail over a copy of its root, the replica started
 * from CMD on the EXPOSEd port in WORKDIR, as the project's uid whatever USER says.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { imageToolsWork } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { TEST_PROJECT } from "../_helpers/server.ts";

type Problem = { status: number; detail: string; errors?: Array<{ path: string; message: string }> };

/** What the app's server tells of where it runs. */
const SERVER = `import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as error:
        return f"unreadable: {error.strerror}"

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        data = json.dumps({
            "uid": os.getuid(),
            "cwd": os.getcwd(),
            "port": os.environ.get("PORT"),
            "built": read("built.txt"),
            "build_uid": read("build_uid.txt"),
            "copied": read("notes/copied.txt"),
            "mode": os.environ.get("APP_MODE"),
            "arg_seen": os.environ.get("APP_HOME"),
            "greeting": os.environ.get("GREETING"),
            "preload": os.environ.get("LD_PRELOAD"),
            "python3_in_image": os.path.exists("/usr/bin/python3"),
            "apt_sandbox": read("/etc/apt/apt.conf.d/00runplane-sandbox"),
            "usr_writable": os.access("/usr", os.W_OK),
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

HTTPServer(("0.0.0.0", 8091), Handler).serve_forever()
`;

const TOML = `[deployment]\nname = "dockerapp"\nruntime = "custom"\n[runtime.custom]\ndockerfile = "Dockerfile"\n`
  + `[env]\nGREETING = "hello"\n`;

/**
 * The Dockerfile: its python3 copied to another name and the image's own removed, so the relay (the
 * host's python3) runs in an image without python3 while the app runs with the copy.
 */
function dockerfile(reference: string, extra = ""): string {
  return [
    `ARG BASE=${reference}`,
    "FROM ${BASE}",
    "ARG APP_HOME=/srv/app",
    "ENV APP_MODE=dockerfile LD_PRELOAD=/nowhere.so",
    "WORKDIR ${APP_HOME}",
    "COPY server.py copied.txt ./notes/",
    "COPY server.py ./",
    'RUN echo "$(grep VERSION_CODENAME /etc/os-release) in $PWD, home $APP_HOME" > built.txt && id -u > build_uid.txt',
    "RUN cp /usr/bin/python3.13 /usr/local/bin/serve && rm -f /usr/bin/python3 /usr/bin/python3.13",
    ...(extra ? [extra] : []),
    "USER 4242",
    "LABEL purpose=test",
    "EXPOSE 8091/tcp",
    'CMD ["/usr/local/bin/serve", "server.py"]',
    "",
  ].join("\n");
}

function dockerApp(text: string): Record<string, string> {
  return { "runplane.toml": TOML, "Dockerfile": text, "server.py": SERVER, "copied.txt": "from the bundle\n" };
}

describe("apps built from their Dockerfile", async () => {
  const ready = await imageToolsWork("dockerfile apps") && await sandboxWorks("dockerfile apps");
  let apps: ImageAppsServer;

  before(async () => {
    if (ready) apps = await startImageAppsServer();
  });

  after(async () => {
    await apps?.close();
  });

  async function call(appId: string): Promise<{ status: number; body: Record<string, unknown> }> {
    const response = await apps.request(`/v4/${TEST_PROJECT}/${appId}/anything`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
    const text = await response.text();
    return { status: response.status, body: response.status === 200 ? JSON.parse(text).result : { text } };
  }

  it("builds the image in the jail and serves CMD on the EXPOSEd port in WORKDIR, as the project's uid", {
    skip: !ready,
  }, async () => {
    const started = performance.now();
    const { deployment, log } = await apps.deployed("dockerapp", dockerApp(dockerfile(apps.reference)));
    const buildSeconds = (performance.now() - started) / 1000;
    assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
    console.error(`first build: ${buildSeconds.toFixed(1)} s`);
    assert.equal(deployment.image?.reference, apps.reference, "the deployment records its FROM");
    assert.match(log, /==> dockerfile: \[1\/12\] FROM /);
    assert.match(log, /==> dockerfile: \[7\/12\] RUN echo .*\n/);
    assert.match(log, /==> dockerfile: \[7\/12\] done \(\d+\.\d s\)/);
    assert.match(log, /USER 4242: replaced by the project's uid/);
    assert.match(log, /==> dockerfile: built image sha256:[0-9a-f]{64} \(\d+\.\d s\)/);
    assert.match(log, /==> image: ENV LD_PRELOAD left out: /);
    const { status, body } = await call("dockerapp");
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.cwd, "/srv/app", "WORKDIR");
    assert.equal(body.port, "8091", "the EXPOSEd port is the replica's PORT");
    assert.equal(body.built, "VERSION_CODENAME=trixie in /srv/app, home /srv/app", "RUN ran in the image, in WORKDIR");
    assert.equal(body.build_uid, "0", "RUN is uid 0 of its own user namespace");
    assert.equal(body.copied, "from the bundle", "COPY of bundle files");
    assert.equal(body.mode, "dockerfile", "ENV reaches the replica");
    assert.equal(body.arg_seen, null, "an ARG is the build's only");
    assert.equal(body.greeting, "hello", "[env] on top");
    assert.equal(body.preload, null, "ENV is filtered by the rules of [env]");
    assert.equal(body.python3_in_image, false, "the relay ran without the image's python3");
    assert.equal(body.apt_sandbox, 'APT::Sandbox::User "root";');
    assert.equal(body.usr_writable, false, "the built image is read-only to its replicas");
    assert.notEqual(body.uid, 0);
    assert.notEqual(body.uid, 4242, "USER is replaced by the project's uid");
  });

  it("builds nothing for a redeploy of the same bundle", { skip: !ready }, async () => {
    const started = performance.now();
    const { deployment, log } = await apps.deployed("dockerapp", dockerApp(dockerfile(apps.reference)));
    assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
    console.error(`cached build: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    assert.match(log, /==> dockerfile: cached image sha256:[0-9a-f]{64}/);
    assert.match(log, /==> dockerfile: \[8\/12\] RUN .*: cached/);
    assert.doesNotMatch(log, /==> dockerfile: (new|built) /);
    assert.equal((await call("dockerapp")).status, 200);
  });

  it("fails the build at a failing RUN, naming it, its line and its output; the previous one keeps serving", {
    skip: !ready,
  }, async () => {
    const failing = dockerfile(apps.reference, "RUN echo about to fail >&2 && false");
    const { deployment, log } = await apps.deployed("dockerapp", dockerApp(failing));
    assert.equal(deployment.status, "failed", log);
    assert.match(deployment.error ?? "", /line 10: RUN echo about to fail >&2 && false: exited with code 1/);
    assert.match(deployment.error ?? "", /last output: "about to fail"/);
    const { status, body } = await call("dockerapp");
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.port, "8091");
  });

  it("refuses at deploy (400) a FROM on a registry the operator does not allow, naming it", {
    skip: !ready,
  }, async () => {
    const response = await apps.deploy("elsewhere", dockerApp(dockerfile("registry.example.com/team/node:20")));
    const problem = (await response.json()) as Problem;
    assert.equal(response.status, 400, JSON.stringify(problem));
    assert.equal(problem.errors?.[0]?.path, "body.runplane.toml");
    assert.match(problem.detail, /FROM "registry\.example\.com\/team\/node:20"/);
    assert.match(problem.detail, /RUNPLANE_IMAGE_REGISTRIES/);
  });

  it("never copies a host file: a source outside the bundle is refused, an absolute one is the bundle's", {
    skip: !ready,
  }, async () => {
    const escaping = dockerfile(apps.reference, "COPY ../../etc/passwd /stolen");
    const response = await apps.deploy("escaping", dockerApp(escaping));
    const problem = (await response.json()) as Problem;
    assert.equal(response.status, 400, JSON.stringify(problem));
    assert.match(problem.detail, /line 10: "\.\.\/\.\.\/etc\/passwd" is outside the bundle/);
    const absolute = dockerfile(apps.reference, "COPY /etc/passwd /stolen");
    const { deployment } = await apps.deployed("absolute", dockerApp(absolute));
    assert.equal(deployment.status, "failed");
    assert.match(deployment.error ?? "", /line 10: COPY \/etc\/passwd \/stolen: "etc\/passwd" is not in the bundle/);
  });

  it("refuses unknown instructions and multi-stage Dockerfiles at deploy, naming the line", {
    skip: !ready,
  }, async () => {
    for (
      const [text, expected] of [
        [dockerfile(apps.reference, "FROBNICATE now"), /line 10: unknown instruction FROBNICATE/],
        [`FROM ${apps.reference} AS build\nCMD ["true"]\n`, /line 1: FROM … AS names a build stage/],
      ] as const
    ) {
      const response = await apps.deploy("refused", dockerApp(text));
      const problem = (await response.json()) as Problem;
      assert.equal(response.status, 400, JSON.stringify(problem));
      assert.match(problem.detail, expected);
    }
  });
});

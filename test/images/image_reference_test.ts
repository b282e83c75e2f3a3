/** Image references: parsed by the distribution grammar, refused when malformed, allowed by registry host. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  assertRegistryAllowed,
  DEFAULT_IMAGE_REGISTRIES,
  ImageReferenceError,
  parseImageReference,
  parseRegistryList,
  registryAllowed,
} from "../../server/images/mod.ts";

const DIGEST = `sha256:${"ab12".repeat(16)}`;

describe("parseImageReference", () => {
  it("reads a Docker Hub official image as docker.io/library/ with its tag", () => {
    assert.deepEqual(parseImageReference("python:3.12-slim"), {
      registry: "docker.io",
      repository: "library/python",
      tag: "3.12-slim",
      digest: null,
      canonical: "docker.io/library/python:3.12-slim",
    });
  });

  it("reads a Docker Hub user's image without adding library/", () => {
    const reference = parseImageReference("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime");
    assert.equal(reference.registry, "docker.io");
    assert.equal(reference.repository, "pytorch/pytorch");
  });

  it("means :latest when neither a tag nor a digest is written", () => {
    assert.equal(parseImageReference("debian").canonical, "docker.io/library/debian:latest");
  });

  it("reads a pinned digest, alone or with a tag", () => {
    const pinned = parseImageReference(`ghcr.io/org/app@${DIGEST}`);
    assert.deepEqual([pinned.registry, pinned.repository, pinned.tag, pinned.digest], [
      "ghcr.io",
      "org/app",
      null,
      DIGEST,
    ]);
    const both = parseImageReference(`nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04@${DIGEST}`);
    assert.equal(both.tag, "12.4.1-runtime-ubuntu22.04");
    assert.equal(both.digest, DIGEST);
    assert.equal(both.canonical, `nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04@${DIGEST}`);
  });

  it("reads a registry host with a port and a nested path", () => {
    const reference = parseImageReference("127.0.0.1:5000/team/base/python:1");
    assert.deepEqual([reference.registry, reference.repository, reference.tag], [
      "127.0.0.1:5000",
      "team/base/python",
      "1",
    ]);
    assert.equal(parseImageReference("localhost/app:dev").registry, "localhost");
    assert.equal(parseImageReference("Registry.Example.COM/app:1").registry, "registry.example.com");
  });

  it("treats Docker Hub's other names as docker.io", () => {
    assert.equal(parseImageReference("index.docker.io/library/python:3").canonical, "docker.io/library/python:3");
    assert.equal(parseImageReference("registry-1.docker.io/python:3").canonical, "docker.io/library/python:3");
  });

  it("refuses malformed references, naming the reference", () => {
    const bad = [
      "",
      "Python:3",
      "python:",
      "python:3 ; rm -rf /",
      "python:$(id)",
      "python:`id`",
      "python|sh",
      "-python:3",
      "--help",
      "python:3\nx",
      "python@sha256:abc",
      `python@md5:${"a".repeat(32)}`,
      `python@sha256:${"A".repeat(64)}`,
      "reg.example.com:99999/app:1",
      "reg.example.com:/app:1",
      "-reg.example.com/app:1",
      "reg.example.com/",
      "reg.example.com/app//x:1",
      "app/../etc:1",
      "app:" + "x".repeat(200),
      "a/".repeat(200) + "b",
    ];
    for (const text of bad) {
      assert.throws(() => parseImageReference(text), (error: Error) => {
        assert.ok(error instanceof ImageReferenceError, text);
        assert.match(error.message, /^The image reference .* is not valid: .+; write name:tag or name@sha256:/);
        return true;
      }, JSON.stringify(text));
    }
  });

  it("never lets a shell metacharacter or whitespace through", () => {
    for (const char of " \t;|&$`'\"<>()*?[]{}!#~\\") {
      assert.throws(() => parseImageReference(`python:3${char}x`), ImageReferenceError, JSON.stringify(char));
      assert.throws(() => parseImageReference(`py${char}thon:3`), ImageReferenceError, JSON.stringify(char));
    }
  });
});

describe("registries", () => {
  it("allows a reference whose registry is listed, port and Docker Hub aliases included", () => {
    assert.ok(registryAllowed(parseImageReference("python:3"), { registries: ["docker.io"] }));
    assert.ok(registryAllowed(parseImageReference("python:3"), { registries: ["index.docker.io"] }));
    assert.ok(registryAllowed(parseImageReference("127.0.0.1:5000/a:1"), { registries: ["127.0.0.1:5000"] }));
    assert.ok(registryAllowed(parseImageReference("GHCR.io/a/b:1"), { registries: ["ghcr.io"] }));
  });

  it("refuses a registry that is not listed, or listed with another port", () => {
    assert.equal(registryAllowed(parseImageReference("evil.example.com/a:1"), { registries: ["docker.io"] }), false);
    assert.equal(registryAllowed(parseImageReference("127.0.0.1:5001/a:1"), { registries: ["127.0.0.1:5000"] }), false);
    assert.equal(registryAllowed(parseImageReference("127.0.0.1:5000/a:1"), { registries: ["127.0.0.1"] }), false);
    assert.equal(registryAllowed(parseImageReference("python:3"), { registries: [] }), false);
  });

  it("names the image, its registry and the setting when it refuses", () => {
    assert.throws(
      () =>
        assertRegistryAllowed(parseImageReference("evil.example.com/a:1"), { registries: DEFAULT_IMAGE_REGISTRIES }),
      (error: Error) => {
        assert.ok(error instanceof ImageReferenceError);
        assert.match(error.message, /evil\.example\.com\/a:1/);
        assert.match(error.message, /registry evil\.example\.com, which this server does not allow/);
        assert.match(error.message, /RUNPLANE_IMAGE_REGISTRIES/);
        return true;
      },
    );
  });

  it("allows the well-known public registries by default and nothing on loopback", () => {
    for (const image of ["python:3", "ghcr.io/a/b:1", "quay.io/a/b:1", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"]) {
      assert.ok(registryAllowed(parseImageReference(image), { registries: DEFAULT_IMAGE_REGISTRIES }), image);
    }
    assert.equal(
      registryAllowed(parseImageReference("localhost:5000/a:1"), { registries: DEFAULT_IMAGE_REGISTRIES }),
      false,
    );
  });

  it("parses a comma-separated list of hosts and refuses an entry that is no host", () => {
    assert.deepEqual(parseRegistryList(" docker.io, GHCR.io ,127.0.0.1:5000,,"), [
      "docker.io",
      "ghcr.io",
      "127.0.0.1:5000",
    ]);
    assert.deepEqual(parseRegistryList(""), []);
    assert.throws(() => parseRegistryList("docker.io,https://ghcr.io"), /"https:\/\/ghcr\.io" is not a registry host/);
    assert.throws(() => parseRegistryList("ghcr.io/org"), ImageReferenceError);
  });
});

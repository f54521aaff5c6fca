"""Build the service's image with podman, offline: `python -m testbed.image [--tag T]` (`make image`).

No container registry is needed. The base is a minimal Debian bookworm made by Debian's
`mmdebstrap` (python3, python3-venv, ca-certificates, tini; about 25 s on an idle machine) and
imported once as `localhost/sas-base:bookworm`; the dependencies are built into wheels by the
base's own python3 (so that environment markers match the image's Python, 3.11.2, not this
machine's), then the Dockerfile installs them with `--no-index`. With a registry at hand, plain
`podman build -t sas .` does the same from the public Debian image and PyPI.

The podman options are the ones this kind of machine needs (docs/deployment.md, "Containers"):
builds with `--isolation=chroot`; containers with runc (crun refuses hybrid cgroups), cgroupfs,
and explicit file and process limits below the machine's hard limits. PODMAN_RUN_OPTIONS is
what the image test passes to `podman run`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "localhost/sas-base:bookworm"
BASE_PACKAGES = "python3,python3-venv,ca-certificates,tini"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
WORK = ROOT / "var" / "image"
WHEELS = ROOT / "build" / "wheels"
PODMAN_RUN_OPTIONS = [
    "--runtime",
    "runc",
    "--cgroup-manager=cgroupfs",
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
]


def log(message: str) -> None:
    print(f"image: {message}", file=sys.stderr, flush=True)


def run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(args), check=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def image_exists(name: str) -> bool:
    return subprocess.run(["podman", "image", "exists", name], check=False).returncode == 0


def ensure_base() -> None:
    """The local Debian base, made and imported once per machine."""
    if image_exists(BASE_IMAGE):
        return
    WORK.mkdir(parents=True, exist_ok=True)
    tarball = WORK / "base-bookworm.tar"
    started = time.monotonic()
    log(f"making the Debian base with mmdebstrap ({BASE_PACKAGES})")
    run(
        "mmdebstrap",
        "--variant=minbase",
        f"--include={BASE_PACKAGES}",
        "bookworm",
        str(tarball),
        MIRROR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run("podman", "import", str(tarball), BASE_IMAGE, stdout=subprocess.DEVNULL)
    tarball.unlink()
    log(f"base made in {time.monotonic() - started:.0f} s")


def build_wheels() -> None:
    """Wheels of the pinned requirements, built by the base's own python3. The machine's CA
    bundle is lent to that container: it is what lets this machine reach PyPI."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    for old in WHEELS.glob("*.whl"):
        old.unlink()
    run(
        "podman",
        "run",
        "--rm",
        *PODMAN_RUN_OPTIONS,
        "--network",
        "host",
        "-v",
        "/etc/ssl/certs:/etc/ssl/certs:ro",
        "-v",
        f"{ROOT / 'requirements.txt'}:/tmp/requirements.txt:ro",
        "-v",
        f"{WHEELS}:/wheels",
        BASE_IMAGE,
        "sh",
        "-c",
        "python3 -m venv /tmp/venv && /tmp/venv/bin/pip wheel -q --disable-pip-version-check"
        " -r /tmp/requirements.txt -w /wheels",
    )


def build_image(tag: str) -> None:
    run(
        "podman",
        "build",
        "--isolation=chroot",
        "--build-arg",
        f"BASE={BASE_IMAGE}",
        "--build-arg",
        f"WHEELS={WHEELS.relative_to(ROOT)}",
        "-t",
        tag,
        str(ROOT),
        stdout=subprocess.DEVNULL,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="localhost/sas:latest")
    args = parser.parse_args()
    started = time.monotonic()
    ensure_base()
    build_wheels()
    build_image(args.tag)
    log(f"{args.tag} built in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerate sas_client.openapi, the typed low-level client, from the service's OpenAPI schema.

    .venv/bin/python clients/python/regenerate.py            # rewrite sas_client/openapi/
    .venv/bin/python clients/python/regenerate.py --check    # exit 1 with a diff when it drifted
    .venv/bin/python clients/python/regenerate.py --schema schema.yml   # from a schema file

The schema is the one the service serves (drf-spectacular's `manage.py spectacular`), made from
the code of the checkout this file sits in; the generator is openapi-python-client, pinned in the
project's requirements-dev.txt, so a regeneration from the same code gives the same files.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PACKAGE = HERE / "sas_client" / "openapi"
CONFIG = HERE / "openapi-config.yml"


def tool_env() -> dict[str, str]:
    """The environment of the generator and of its ruff hooks: this interpreter's bin folder
    first on PATH (the hooks call `ruff` by name), and a debug Django so that the schema command
    needs no secret key."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("DJANGO_DEBUG", "1")
    return env


def write_schema(path: Path) -> None:
    """The service's OpenAPI schema, as drf-spectacular makes it, written to `path`."""
    subprocess.run(
        [sys.executable, "manage.py", "spectacular", "--file", str(path), "--validate", "--fail-on-warn"],
        cwd=ROOT,
        env=tool_env(),
        check=True,
    )


def generate(schema: Path, output: Path) -> None:
    """openapi-python-client's package for `schema`, written to `output` (replaced whole)."""
    generator = Path(sys.executable).parent / "openapi-python-client"
    subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            str(schema),
            "--meta",
            "none",
            "--config",
            str(CONFIG),
            "--output-path",
            str(output),
            "--overwrite",
            "--fail-on-warning",
        ],
        cwd=output.parent,
        env=tool_env(),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def files_of(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def drift(expected: Path, actual: Path) -> str:
    """A unified diff from the committed package (`actual`) to a fresh generation (`expected`);
    empty when they are the same."""
    new, old = files_of(expected), files_of(actual)
    lines: list[str] = []
    for name in sorted(new.keys() | old.keys()):
        before, after = old.get(name, ""), new.get(name, "")
        if before != after:
            lines += difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=f"committed/{name}" if name in old else "/dev/null",
                tofile=f"generated/{name}" if name in new else "/dev/null",
            )
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schema", type=Path, help="an OpenAPI schema file (default: the service's own)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 with a diff on drift")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        schema = args.schema.resolve() if args.schema else Path(tmp) / "schema.yml"
        if not args.schema:
            write_schema(schema)
        fresh = Path(tmp) / "openapi"
        generate(schema, fresh)
        if args.check:
            diff = drift(fresh, PACKAGE)
            if diff:
                sys.stdout.write(diff)
                sys.stdout.write(
                    "\nsas_client.openapi differs from the service's schema: "
                    "run .venv/bin/python clients/python/regenerate.py\n"
                )
                return 1
            return 0
        shutil.rmtree(PACKAGE, ignore_errors=True)
        shutil.copytree(fresh, PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""No two modules import each other, even through an import inside a function.

import-linter's `acyclic_siblings` contract (pyproject.toml) holds this between the modules and
subpackages of each package, but a package's `__init__` is not a sibling of its own modules: a
module importing its package while the package imports it escapes the contract. This test reads
the module graph itself, with every import grimp finds (inside functions, and `from package
import module` as an import of the module).
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

pytestmark = pytest.mark.sqlite

PACKAGES = ("sas_project", "agents", "scheduler", "supervisor", "testbed")


def import_cycles(*packages: str) -> list[tuple[str, ...]]:
    """The import cycles among the packages' modules, each as its shortest path back to its first
    module (`a, b, ..., a`), each set of modules once."""
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    cycles: dict[frozenset[str], tuple[str, ...]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycle = (module, *back)
                cycles.setdefault(frozenset(cycle), cycle)
    return sorted(cycles.values())


def write_package(root: Path, name: str, modules: dict[str, str]) -> None:
    package = root / name
    package.mkdir()
    for module, source in modules.items():
        (package / f"{module}.py").write_text(source)


def test_no_module_of_the_product_or_the_tools_imports_itself_through_others() -> None:
    cycles = import_cycles(*PACKAGES)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_a_cycle_closed_by_an_import_inside_a_function_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(
        tmp_path,
        "knot_local",
        {
            "__init__": "",
            "pump": "def pump():\n    from knot_local import dispatch\n\n    return dispatch\n",
            "dispatch": "from knot_local.pump import pump\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("knot_local") == [("knot_local.dispatch", "knot_local.pump", "knot_local.dispatch")]


def test_a_module_importing_its_own_package_that_imports_it_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(
        tmp_path,
        "knot_parent",
        {
            "__init__": "from knot_parent.http import serve\n",
            "http": "def serve():\n    import knot_parent\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("knot_parent") == [("knot_parent", "knot_parent.http", "knot_parent")]

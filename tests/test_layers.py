"""The tree shows its layers, and its imports keep to them (design.md §2: data flows one way,
reader → records → writer). Read from the source, top-level and function-level imports alike:

- `ingest.process` (how the work runs) imports nothing else of the project;
- `ingest.shape` (records, prepared batches) nothing of the readers, the writer or the plumbing;
- `ingest.read` never the writer, and `ingest.write` none of the readers;
- `tools` (the synthetic data generators) nothing of the ingest, and of the warehouse only its
  queries' statistics (tools/simulate_stats.py measures them on simulated runs);
- `warehouse/__init__.py` imports nothing of the ingest, and the ingest takes from the
  `warehouse` package only its modules (the version from `warehouse.version`), never a name
  defined in its `__init__`, so neither package's top needs the other's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("ingest", "warehouse", "tools", "migrations", "bench")

# What each layer may import of the project, beside itself (a name and everything under it).
MAY_IMPORT = {
    "ingest.process": (),
    "ingest.shape": ("warehouse",),
    "ingest.read": ("ingest.shape", "ingest.process", "warehouse"),
    "ingest.write": ("ingest.shape", "ingest.process", "warehouse"),
    "tools": ("warehouse.queries",),
}


def imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, imported name or None) for every absolute import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def targets(module: str, name: str | None) -> str:
    """What `from module import name` reaches: the submodule if there is one, else the module."""
    if name is None:
        return module
    sub = ROOT.joinpath(*module.split("."), name)
    return f"{module}.{name}" if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists() else module


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_each_layer_imports_only_the_layers_below_it(layer):
    files = sorted(ROOT.joinpath(*layer.split(".")).rglob("*.py"))
    assert files, f"{layer} holds no module"
    wrong = [f"{path.relative_to(ROOT)}:{line}: {targets(module, name)}"
             for path in files for line, module, name in imports(path)
             if within(module, PROJECT) and not within(targets(module, name), (layer, *MAY_IMPORT[layer]))]
    assert not wrong, "\n".join(wrong)


def test_the_ingest_and_the_warehouse_package_top_need_not_each_other():
    top = imports(ROOT / "warehouse" / "__init__.py")
    assert not [module for _, module, _ in top if within(module, ("ingest",))]
    # A name taken from the warehouse package itself (not one of its modules) runs its __init__
    # for that name: the version once lived there, so ingest/writer.py needed the API's package.
    from_top = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in sorted((ROOT / "ingest").rglob("*.py"))
                for line, module, name in imports(path) if module == "warehouse" and targets(module, name) == module]
    assert not from_top, "\n".join(from_top)


def test_the_version_has_one_home():
    import tomllib

    import warehouse
    from warehouse import version

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "warehouse.version.__version__"}
    assert warehouse.__version__ == version.__version__ and "__version__" in dir(warehouse)
    homes = [str(path.relative_to(ROOT)) for package in PROJECT for path in sorted((ROOT / package).rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)]
    assert homes == ["warehouse/version.py"]


WEB = ("flask", "werkzeug", "jinja2", "markupsafe")


def test_the_web_viewer_is_a_layer_on_top_that_nothing_else_needs():
    """warehouse.serve stands on the library as the CLI does (neither the CLI nor the ingest), and
    only it imports the web stack, and only `warehouse serve` imports it: no other command pays
    for Flask."""
    serve = ROOT / "warehouse" / "serve"
    # Beside the library, only the output formats, declared once (a download is what the CLI prints).
    wrong = [f"{path.relative_to(ROOT)}:{line}: {module}" for path in sorted(serve.rglob("*.py"))
             for line, module, _ in imports(path)
             if within(module, ("warehouse.cli", "ingest")) and module != "warehouse.cli.output"]
    assert not wrong, "\n".join(wrong)
    # (The benchmark, which measures the viewer, is no command.)
    outside = [path for name in PROJECT if name != "bench" for path in sorted(ROOT.joinpath(name).rglob("*.py"))
               if serve not in path.parents]
    web = [f"{path.relative_to(ROOT)}:{line}: {module}" for path in outside for line, module, _ in imports(path)
           if within(module, WEB) or (within(module, ("warehouse.serve",)) and path != ROOT / "warehouse/cli/serve.py")]
    assert not web, "\n".join(web)

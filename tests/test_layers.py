"""The contracts of docs/ARCHITECTURE.md: layers import downward only (import-linter's contracts in
pyproject.toml, static), and importing every module of ``analysis`` and ``reports`` loads neither
torch nor any of the training core but the run-directory format and the config types (run time)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_are_kept():
    result = lint_imports(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    "importer, imported", [("repro.plans", "analysis.study"), ("analysis.study", "repro.plans")]
)
def test_an_upward_or_sideways_import_breaks_the_layers_contract(tmp_path, importer, imported):
    """The same contracts on empty packages of the same names, one of which imports a layer above it
    or its independent sibling (analysis and repro)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = {
        m.strip()
        for c in config["contracts"]
        for key in ("layers", "source_modules", "forbidden_modules")
        for layer in c.get(key, [])
        for m in layer.split("|")
    }
    for package in named:
        directory = tmp_path / package.replace(".", "/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "__init__.py").write_text("")
    for module in (importer, imported):
        (tmp_path / f"{module.replace('.', '/')}.py").write_text(
            f"import {imported}\n" if module == importer else ""
        )
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    result = lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert result.returncode != 0
    assert f"{importer} -> {imported}" in result.stdout


def test_analysis_and_reports_load_no_training_code():
    probe = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import analysis, reports
        for package in (analysis, reports):
            for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                importlib.import_module(module.name)
        print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "algorithms"))))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout.split()
    assert "torch" not in out
    allowed = {"algorithms", "algorithms.configs", "algorithms.rundir"}
    assert [m for m in out if m not in allowed and not m.startswith("algorithms.rundir.")] == [], out
    assert "algorithms.rundir" in out


# The ast graph below sees what import-linter skips: TYPE_CHECKING imports, function-local imports
# inside a package, bench, and dispatch by name: a string that names a module ("a.b", or "a.b:f" as
# the registries of runners, samplers and CLI commands write them) is an import of that module.
GRAPHED = ("algorithms", "protocol", "repro", "analysis", "reports", "bench")


def named_modules(tree: ast.AST, files: dict[str, Path]) -> set[str]:
    """The modules that string constants in ``tree`` name, alone or before a ``:``."""
    return {
        node.value.partition(":")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.partition(":")[0] in files
        and "." in node.value
    }


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports anywhere in its text (``from a import b`` names ``a.b``
    where that is a module, else ``a``) or names in a string (``named_modules``)."""
    files = {}
    for package in GRAPHED:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        targets = named_modules(tree, files)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}".rstrip(".")
                names = (f"{base}.{alias.name}" for alias in node.names)
                targets.update(name if name in files else base for name in names)
        graph[module] = {t for t in targets if t in files and t != module}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The import circles of ``graph``: each set of modules that reach one another, sorted."""
    reach = {module: reachable(graph, module) for module in graph}
    found = {tuple(sorted(m for m in reach[module] if module in reach[m])) for module in graph}
    found.discard(())
    return sorted(found)


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [("a", "b", "c")]


def test_a_module_named_in_a_string_is_an_import():
    files = {"pkg.runner": Path("runner.py"), "pkg.cli": Path("cli.py")}
    tree = ast.parse('RUNNERS = {"sync": "pkg.runner:run"}\nHELP = "see pkg.cli"\nMODE = "pkg"')
    assert named_modules(tree, files) == {"pkg.runner"}


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def imports_of(package: str, graph: dict[str, set[str]] | None = None) -> set[str]:
    """The modules outside ``package`` that its modules import."""
    graph = import_graph() if graph is None else graph
    inside = [m for m in graph if m.split(".")[0] == package]
    return {t for m in inside for t in graph[m] if t.split(".")[0] != package}


# What the layers above the training core may import of it (docs/ARCHITECTURE.md's picture): the
# config types and the run-directory format, which import no torch.
TORCH_FREE_CORE = ("algorithms.configs", "algorithms.rundir")


def core_imports_off_the_picture(package: str, graph: dict[str, set[str]] | None = None) -> set[str]:
    """The modules of ``algorithms`` that ``package`` imports beyond ``TORCH_FREE_CORE``."""
    return {
        t
        for t in imports_of(package, graph)
        if t.split(".")[0] == "algorithms"
        and not any(t == m or t.startswith(m + ".") for m in TORCH_FREE_CORE)
    }


def test_an_import_of_training_code_is_off_the_picture():
    graph = {
        "analysis.a": {"algorithms.rundir.reader", "algorithms.configs"},
        "analysis.b": {"algorithms.train"},
    }
    assert core_imports_off_the_picture("analysis", graph) == {"algorithms.train"}


@pytest.mark.parametrize("package", ["analysis", "reports", "protocol"])
def test_the_layers_above_import_only_the_torch_free_core(package):
    assert core_imports_off_the_picture(package) == set()


def test_analysis_imports_no_repro():
    assert {t for t in imports_of("analysis") if t.startswith("repro")} == set()


def test_protocol_imports_only_the_config_types_and_run_format_of_algorithms():
    assert imports_of("protocol") <= {"algorithms.configs", "algorithms.rundir"}


def test_reports_imports_only_the_run_format_of_algorithms():
    assert {t for t in imports_of("reports") if t.startswith("algorithms")} <= {"algorithms.rundir"}

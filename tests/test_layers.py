"""The contracts of docs/ARCHITECTURE.md: layers import downward only (import-linter's contracts in
pyproject.toml, static), and importing every module of ``analysis`` and ``reports`` loads neither
torch nor any of the training core but the run-directory format and the config types (run time)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

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


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    """The same contracts on empty packages of the same names, one of which imports a layer above it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = {
        m
        for c in config["contracts"]
        for key in ("layers", "source_modules", "forbidden_modules")
        for m in c.get(key, [])
    }
    for package in named:
        directory = tmp_path / package.replace(".", "/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "__init__.py").write_text("")
    (tmp_path / "repro" / "plans.py").write_text("import analysis.study\n")
    (tmp_path / "analysis" / "study.py").write_text("")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    result = lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert result.returncode != 0
    assert "repro.plans -> analysis.study" in result.stdout


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

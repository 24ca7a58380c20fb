"""Every document the repository cites exists.

Scanned: the Markdown and TOML files of the repository (tracked, or new and not ignored) in full,
and the comments and docstrings of its Python files (string literals in code are data, such as a
test's temporary paths, not citations). A citation is a path ending in ``.md``, or any path under
``docs/``. It must name a file or directory relative to the repository root or to the citing file's
directory; a bare file name (``SOURCES.md``) is ambiguous and only needs to name some file of the
repository. A path whose first directory is not one of the repository's (a file of another
project, cited with its repository) is not this test's business.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CITATION = re.compile(r"(?<![\w./-])((?:\.\.?/)*(?:[\w.-]+/)*[\w-][\w.-]*\.md\b|docs/[\w./-]*\w)")


def repository_files() -> list[str]:
    """Repository paths of the files git tracks, and of new files it does not ignore."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted({line for line in out.splitlines() if (ROOT / line).is_file()})


def python_prose(source: str) -> str:
    """The comments and docstrings of a Python source, one per line."""
    parts = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                parts.append(docstring)
    return "\n".join(parts)


def citations(path: str) -> Iterator[str]:
    """The cited paths in the repository file ``path``."""
    text = (ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".py"):
        text = python_prose(text)
    yield from _CITATION.findall(text)


def is_broken(citing: str, cited: str, files: list[str]) -> bool:
    """Whether ``cited``, cited in the repository file ``citing``, names nothing it should."""
    if "/" not in cited:
        return cited not in {Path(f).name for f in files}
    if (ROOT / cited).exists() or (ROOT / citing).parent.joinpath(cited).exists():
        return False
    first = cited.split("/")[0]
    top_level = {f.split("/")[0] for f in files if "/" in f}
    return first in (".", "..") or first in top_level


def broken_citations(files: list[str]) -> list[str]:
    return [
        f"{citing}: {cited}"
        for citing in files
        if citing.endswith((".py", ".md", ".toml"))
        for cited in sorted(set(citations(citing)))
        if is_broken(citing, cited, files)
    ]


def test_the_scan_finds_citations() -> None:
    # Guards the test itself: a pattern that matched nothing would pass any repository.
    found = set(citations("README.md"))
    assert "docs/ray_cluster.md" in found
    assert any(c.startswith("docs/results") for c in found)


def test_every_cited_document_exists() -> None:
    assert broken_citations(repository_files()) == []


def test_a_missing_document_is_reported(tmp_path: Path) -> None:
    files = repository_files()
    assert is_broken("README.md", "docs/no_such_page.md", files)
    assert is_broken("algorithms/counters.py", "NO_SUCH_GUIDE.md", files)
    assert is_broken("repro/README.md", "../docs/no_such_page.md", files)
    assert not is_broken("repro/README.md", "../docs/ray_cluster.md", files)
    assert not is_broken("analysis/scores.py", "data/SOURCES.md", files)
    # Another project's file, cited with its repository, is not checked.
    assert not is_broken("repro/configs/README.md", "_posts/2019-09-24-rlpyt.md", files)
    # Comments and docstrings are read, code is not.
    source = '"""See docs/a.md."""\n# and docs/b.md\nPATH = "docs/c.md"\n'
    assert sorted(_CITATION.findall(python_prose(source))) == ["docs/a.md", "docs/b.md"]

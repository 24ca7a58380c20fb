"""Where the study's files live and how they are read and named: the shipped settings, plans and
profiles under ``repro/configs`` (beside this package in a checkout and in site-packages alike), TOML
read with one-line errors, and paths as records name them (relative to the repository)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError

CONFIG_DIR = Path(__file__).parent.parent / "repro" / "configs"
SETTINGS_DIR = CONFIG_DIR / "settings"
PLANS_DIR = CONFIG_DIR / "plans"
PROFILES_DIR = CONFIG_DIR / "profiles"
REPO_ROOT = CONFIG_DIR.resolve().parents[1]


def read_toml(path: Path) -> dict[str, Any]:
    """Parse ``path``; a syntax error becomes a one-line ``ConfigError`` naming the file."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: TOML syntax error: {str(e).splitlines()[0]}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e.reason}") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(f"{path}: arrays or tables nested too deeply to read") from None


def is_shipped(path: Path | str) -> bool:
    """Whether ``path`` is one of the profiles in ``repro/configs/profiles``, loadable by its name."""
    return Path(path).resolve().parent == PROFILES_DIR.resolve()


def profile_label(path: Path | str) -> str:
    """How records and reports name a profile: a shipped profile by its name, any other file by its
    path relative to the repository (absolute outside it), so no record carries the path of the
    checkout that ran it."""
    return Path(path).stem if is_shipped(path) else repo_path(path)


def repo_path(path: Path | str) -> str:
    """``path`` relative to the repository when inside it, else absolute: how records and reports name
    a file, so that none carries the path of the checkout that wrote it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(resolved)

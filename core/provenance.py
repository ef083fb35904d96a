"""Provenance of a build: how a manifest names its inputs (path, sha256, records) and the code that ran
(tansaku's version, the git commit in a checkout, the versions of the libraries that shape the rows).

    describe_input("out/corpus", 3979)   # {"path": "out/corpus", "sha256": "…", "records": 3979}
    code_version(), package_versions()
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tansaku

_PACKAGES = ("tansaku", "datasets", "polars", "pyarrow", "transformers", "trl", "torch", "tantivy",
             "sudachipy", "ja-law-parser", "json-repair", "openai", "huggingface_hub")


def sha256_path(path: str | Path) -> str:
    """sha256 of a file, or of a folder's files (relative names and contents, in sorted order)."""
    p = Path(path)
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and ".work" not in f.parts)
    for f in files:
        if p.is_dir():
            h.update(str(f.relative_to(p)).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def describe_input(path: str | Path, records: int | None = None, *, hashed: bool = True) -> dict:
    """How a manifest names one input; the one place that shapes them, so every input has the same keys.

    ``sha256`` is None for an input that is not a local file or folder (a remote index such as
    ``opensearch:NAME``) or that the build does not hash (``hashed=False``); ``records`` is None when the
    count is not known.
    """
    digest = sha256_path(path) if hashed and Path(str(path)).exists() else None
    return {"path": str(path), "sha256": digest, "records": records}


def code_version() -> dict:
    """tansaku's version from package metadata; the git commit only when the code runs from a checkout.

    An installed wheel has no repository around it (git would describe whatever project the user runs in),
    so ``commit`` / ``dirty`` are None unless the package root is itself a git checkout.
    """
    root = Path(__file__).resolve().parents[1]  # the package root: in a checkout, the repository root
    info = {"package": "tansaku", "version": tansaku.__version__, "commit": None, "dirty": None}
    if not (root / ".git").exists():
        return info
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return info
    return {**info, "commit": commit or None, "dirty": dirty if commit else None}


def package_versions() -> dict:
    versions = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions

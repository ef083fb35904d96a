"""Which model a name points at, and what identifies that model's answers in the response cache.

A model is named by a local folder or a Hugging Face Hub id (``Qwen/Qwen3-1.7B``). :func:`resolve_model`
turns either into a folder: a Hub id through the HF cache (``HF_HOME`` / ``HF_HUB_CACHE``, ``HF_TOKEN`` as
``huggingface_hub`` reads them; with ``HF_HUB_OFFLINE=1`` only what is cached, never the network).

:func:`local_model_identity` is what the cache keys a local model's answers on: its resolved path plus a
fingerprint of its weights and of the small files that shape the prompt (config, tokenizer, chat template).
Two models in folders with the same basename, or a folder retrained in place, never share answers.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.value_checks import repo_id_problem

# Small files that change the rendered prompt or the generation defaults: hashed whole.
_PROMPT_FILES = ("*.json", "*.jinja")
# Weight files are too big to hash whole; three slices of each catch a retrain even when the copy kept mtimes.
_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.gguf")
_SLICE = 64 * 1024
# What a Hub snapshot needs for generation (not onnx/flax copies, not .bin twins of safetensors).
_HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]
_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) as set now, not when huggingface_hub was imported."""
    return any(os.environ.get(name, "").upper() in _TRUE
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_cache_dir() -> Path:
    """The HF hub cache as the environment names it now (``HF_HUB_CACHE`` > ``HF_HOME``/hub > default)."""
    if os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ.get("HF_HUB_CACHE") or os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"


def is_hub_id(name: str) -> bool:
    """``org/name`` (or ``name``) as the Hub validates repo ids
    (``tansaku.core.value_checks.repo_id_problem``, the one check every repo-id option runs), and not a
    path-looking string."""
    if name.startswith((".", "/", "~")) or name.endswith("/") or os.sep + os.sep in name:
        return False
    return repo_id_problem(name) is None


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of a Hub model, or None when it is not in the HF cache (no network)."""
    from huggingface_hub import snapshot_download  # huggingface_hub: only for Hub ids
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, cache_dir=hub_cache_dir(), local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError):
        return None


def resolve_model(name: str | os.PathLike) -> Path:
    """A local model folder, or the snapshot folder of a Hub id (downloaded unless offline)."""
    path = Path(name).expanduser()
    if path.exists():
        return path.resolve()
    text = str(name)
    if not is_hub_id(text):
        raise MissingInputError(f"model not found: {text} is neither a local folder nor a Hub id (org/name)")
    cached = cached_snapshot(text)
    if cached is not None:
        return cached
    if hub_offline():
        raise MissingInputError(f"model {text} is not in the Hugging Face cache {hub_cache_dir()} "
                                "and HF_HUB_OFFLINE=1 forbids downloading it")
    from huggingface_hub import snapshot_download  # huggingface_hub: only for Hub ids
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(text, cache_dir=hub_cache_dir(), allow_patterns=_HUB_FILES))
    except RepositoryNotFoundError:
        raise MissingInputError(f"model {text}: no such local folder or Hub repo (or it needs "
                                f"HF_TOKEN)") from None
    except HfHubHTTPError as exc:
        raise InputError(f"model {text}: cannot download from the Hub: {str(exc).splitlines()[0]}") from None
    except LocalEntryNotFoundError:  # the Hub could not be reached and nothing is cached
        raise MissingInputError(f"model {text}: not a local folder, not in the HF cache {hub_cache_dir()}, "
                                "and the Hub cannot be reached") from None


def _slices_digest(file: Path, size: int) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for offset in sorted({0, max(0, size // 2 - _SLICE // 2), max(0, size - _SLICE)}):
            handle.seek(offset)
            digest.update(handle.read(_SLICE))
    return digest.hexdigest()


def weights_fingerprint(folder: Path) -> str:
    """Short hash of the weight files (name, size, mtime, three content slices) and the prompt files."""
    digest = hashlib.sha256()
    if folder.is_dir():
        for pattern in _WEIGHT_FILES:
            for file in sorted(folder.glob(pattern)):
                stat = file.stat()
                slices = _slices_digest(file, stat.st_size)
                digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}:{slices}\n".encode())
        for pattern in _PROMPT_FILES:
            for file in sorted(folder.glob(pattern)):
                digest.update(f"{file.name}:".encode() + hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()[:16]


def local_model_identity(folder: Path) -> dict:
    """Cache identity of a local model folder: where it resolves to and what is in it."""
    resolved = folder.resolve()
    return {"path": str(resolved), "weights": weights_fingerprint(resolved)}

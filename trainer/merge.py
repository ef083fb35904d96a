"""`train merge`: model soups, chat vectors and LoRA merges over safetensors checkpoints.

    train merge soup OUT ckpt_a ckpt_b [--weights 0.7,0.3]
    train merge chat-vector OUT TARGET INSTRUCT BASE [--scale 1.0] [--exclude embed_tokens,lm_head]
    train merge lora OUT ADAPTER [--base BASE]
    python -c "from tansaku.trainer.merge import run_merge; run_merge('soup', ['a', 'b'], 'out')"

- soup: θ = Σ wᵢ θᵢ / Σ wᵢ (uniform when no weights), e.g. one RL checkpoint per task.
- chat_vector: θ = θ_target + scale · (θ_instruct − θ_base): gives a continually pre-trained base
  (target) the instruction following of the instruct model. Tensors matching ``exclude`` (substring)
  are copied from the target unchanged, which is what you want when the target's vocabulary grew.
- lora: the adapter folded into its base weights with peft's ``merge_and_unload`` (whole model in memory).

Soups and chat vectors stream: each tensor is read from every input with ``safetensors.safe_open``,
combined in float32, cast back to the input dtype (or ``dtype``) and written into shards of at most
``max_shard_bytes``, so memory holds one shard plus one tensor per input, not whole models.
Config, tokenizer and chat template files are copied from the first model (soup) or the instruct
model (chat vector), since the result should talk like it.

``--out`` must be missing, empty or a merge tansaku wrote (``tansaku_model.json``), and neither one of the
input folders nor inside nor around one; both are checked before any tensor is read or model loaded. The
merge is written into a hidden sibling and swapped in whole (``tansaku.core.swapped_outputs.swapped_in``),
so an earlier merge in the folder is replaced with nothing of it left (no stale shard), and a killed merge
leaves only what the next one removes. Weights and scales must be finite (a NaN weight gives NaN tensors).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tansaku.core import jsontext, ownership, safe_write, swapped_outputs
from tansaku.core.cli_types import is_model_path
from tansaku.core.errors import InputError

WEIGHT_INDEX = "model.safetensors.index.json"
METHODS = ("soup", "chat_vector", "lora")
DEFAULT_SHARD_BYTES = 4 * 1024**3


class MergeError(InputError):
    """Inputs that cannot be merged (missing files, different tensor names or shapes)."""


def weight_files(model_dir: str | Path) -> dict[str, Path]:
    """Tensor name → safetensors file for a checkpoint folder (single file or sharded with an index)."""
    d = Path(model_dir)
    index = d / WEIGHT_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        if outside := sorted({str(f) for f in weight_map.values()
                              if Path(str(f)).name != f or f in ("", ".", "..")}):
            raise MergeError(f"{index}: its weight_map names files outside {d} ({', '.join(outside[:3])}); "
                             "a checkpoint's index names only files in its own folder")
        return {name: d / fname for name, fname in weight_map.items()}
    files = sorted(d.glob("*.safetensors")) if d.is_dir() else []
    files = [f for f in files if not f.name.startswith("adapter_")]
    if not files:
        raise MergeError(f"{d}: no *.safetensors weights found (is it a checkpoint folder?)")
    from safetensors import safe_open  # torch, safetensors, peft: loaded when merging

    names: dict[str, Path] = {}
    for f in files:
        with safe_open(f, framework="pt") as fh:
            names.update({name: f for name in fh.keys()})
    return names


class _ShardWriter:
    """Collects output tensors and writes ``model-0000i.safetensors`` shards + an index when they add up."""

    def __init__(self, out_dir: Path, max_shard_bytes: int):
        self.out_dir, self.max_bytes = out_dir, max_shard_bytes
        self.pending: dict = {}
        self.pending_bytes = 0
        self.shards: list[dict] = []

    def add(self, name: str, tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > self.max_bytes:
            self.flush()
        self.pending[name] = tensor.contiguous()
        self.pending_bytes += size

    def flush(self) -> None:
        if not self.pending:
            return
        from safetensors.torch import save_file  # torch, safetensors, peft: loaded when merging

        # a fresh temp name (mkstemp), renamed in close() once the shard count, and so the names, are known
        tmp = safe_write.temp_path(self.out_dir / f"shard-{len(self.shards):05d}")
        save_file(self.pending, str(tmp), metadata={"format": "pt"})
        self.shards.append({"file": tmp, "names": list(self.pending), "bytes": self.pending_bytes})
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        self.flush()
        if len(self.shards) == 1:
            os.replace(self.shards[0]["file"], self.out_dir / "model.safetensors")
            return
        n, weight_map, total = len(self.shards), {}, 0
        for i, shard in enumerate(self.shards, 1):
            fname = f"model-{i:05d}-of-{n:05d}.safetensors"
            os.replace(shard["file"], self.out_dir / fname)
            weight_map.update({name: fname for name in shard["names"]})
            total += shard["bytes"]
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        safe_write.write_text_atomic(self.out_dir / WEIGHT_INDEX, json.dumps(index, indent=2))


def side_files(src: Path) -> list[Path]:
    """Config, tokenizer, chat template: everything in the folder except weights and training state.
    MergeError (one line, checked before any work) for a symbolic link among them: whatever it points to (a
    key, another user's file) would land in the merged model. Refused, not copied as a link: a link in the
    merged folder would still hand the target to whoever loads or uploads the model."""
    files = [f for f in sorted(src.iterdir()) if (f.is_file() or f.is_symlink() and not f.is_dir())
             and f.suffix != ".safetensors" and f.name not in (WEIGHT_INDEX, "training_args.bin")
             and not f.name.startswith(("optimizer", "scheduler", "rng_state", "trainer_state", "adapter_",
                                        "tansaku_", ".tansaku_"))]  # no other output's marker
    if linked := [f for f in files if f.is_symlink()]:
        raise MergeError(f"{src}: {', '.join(f.name for f in linked[:3])} is a symbolic link (to "
                         f"{os.path.realpath(linked[0])}); train merge copies no linked file into a model, "
                         "since its target's contents would land there: replace the link with a copy of the "
                         "file")
    return files


def _copy_side_files(src: Path, out_dir: Path) -> None:
    """:func:`side_files` copied into ``out_dir``; opened without following links (one planted since the check
    is refused too)."""
    for f in side_files(src):
        safe_write.copy_file_atomic(f, out_dir / f.name)
        shutil.copystat(f, out_dir / f.name, follow_symlinks=False)  # times and mode, as copy2 kept them


def check_out(out_dir: str | Path, inputs: dict[str, object]) -> Path:
    """``out_dir`` as a Path when a merge may write it (missing, empty, a merge tansaku wrote) and it is none
    of the ``inputs`` (option → path or paths), nor inside nor around one; else InputError, nothing
    written."""
    out = ownership.refuse_unmarked(out_dir, "--out", ownership.MODEL_MARKER, "merge", "merged model")
    ownership.refuse_overlap(out, inputs)
    return out


@contextmanager
def _written(out: Path, info: dict) -> Iterator[Path]:
    """A hidden folder to write the merged model into, locked and swapped in for ``out`` when the block ends
    without an error, with ``tansaku_model.json`` (``info``) that proves whose it is."""
    def check() -> None:  # again under the lock
        ownership.refuse_unmarked(out, "--out", ownership.MODEL_MARKER, "merge", "merged model")

    with ownership.claimed(out, "--out", check), swapped_outputs.swapped_in(out, "--out") as tmp:
        yield tmp
        # all it may replace
        files = sorted(p.name for p in tmp.iterdir() if p.name != ownership.PARTIAL_MARKER)
        safe_write.write_text_atomic(tmp / ownership.MODEL_MARKER,
                                     jsontext.dumps({"kind": "merge", **info, "files": files}, indent=2))


def merge_streaming(models: list[str | Path], combine: Callable[[str, list], object], out_dir: str | Path,
                    side_files_from: str | Path, dtype: str | None = None,
                    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
                    first_only: Callable[[str], bool] = lambda name: False) -> Path:
    """Write ``combine(name, [tensor of each model, float32])`` for every tensor of the first model.

    The models must share tensor names and shapes (checked tensor by tensor), except tensors for which
    ``first_only(name)`` is true: those are copied from the first model as they are.
    """
    import torch  # torch, safetensors, peft: loaded when merging
    from safetensors import safe_open

    out = check_out(out_dir, {"model": [str(m) for m in models], "side files from": str(side_files_from)})
    side_files(Path(side_files_from))  # a linked side file is refused before any tensor is read
    maps = [weight_files(m) for m in models]
    names = list(maps[0])
    combined = {n for n in names if not first_only(n)}
    for m, wmap in zip(models[1:], maps[1:]):
        missing, extra = combined - set(wmap), {n for n in wmap if not first_only(n)} - set(names)
        if missing or extra:
            raise MergeError(f"{m} has different tensors than {models[0]}: "
                             f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
    handles: dict[Path, object] = {}  # one open handle per file; get_tensor reads only that tensor

    def read(wmap, name):
        f = wmap[name]
        if f not in handles:
            handles[f] = safe_open(f, framework="pt")
        return handles[f].get_tensor(name)

    with _written(out, {"models": [str(m) for m in models]}) as tmp:
        writer = _ShardWriter(tmp, max_shard_bytes)
        for name in names:
            first = read(maps[0], name)
            out_dtype = getattr(torch, dtype) if dtype else first.dtype
            if name not in combined:
                writer.add(name, first.to(out_dtype))
                continue
            tensors = [first] + [read(wmap, name) for wmap in maps[1:]]
            shapes = {tuple(t.shape) for t in tensors}
            if len(shapes) > 1:
                raise MergeError(f"tensor {name}: shapes differ across models {sorted(shapes)}"
                                 " (for a chat vector with a grown vocabulary, exclude it)")
            writer.add(name, combine(name, [t.to(torch.float32) for t in tensors]).to(out_dtype))
        writer.close()
        _copy_side_files(Path(side_files_from), tmp)
    return out


def soup(models: list[str | Path], out_dir: str | Path, weights: list[float] | None = None,
         dtype: str | None = None, max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> Path:
    """Weighted average of checkpoints (uniform without weights); weights are normalized to sum to 1."""
    if not models:
        raise MergeError("soup needs at least one model")
    weights = [1.0] * len(models) if weights is None else [float(w) for w in weights]
    if not all(math.isfinite(w) for w in weights):  # NaN/inf would write NaN tensors
        raise MergeError(f"soup: every --weight must be a finite number, got {weights}")
    if len(weights) != len(models) or sum(weights) == 0:
        raise MergeError(f"soup: --weight needs one weight per model ({len(models)}) with a non-zero sum, "
                         f"got {weights}")
    norm = [w / sum(weights) for w in weights]

    def average(_name, tensors):
        total = tensors[0] * norm[0]
        for w, t in zip(norm[1:], tensors[1:]):
            total += t * w
        return total

    return merge_streaming(models, average, out_dir, models[0], dtype, max_shard_bytes)


def chat_vector(target: str | Path, instruct: str | Path, base: str | Path, out_dir: str | Path,
                scale: float = 1.0, exclude: list[str] | None = None, dtype: str | None = None,
                max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> Path:
    """θ_target + scale · (θ_instruct − θ_base); tensors whose name contains an ``exclude`` item stay
    θ_target."""
    exclude = list(exclude or [])
    if not math.isfinite(scale):
        raise MergeError(f"chat_vector: --scale must be a finite number, got {scale}")

    def add_vector(_name, tensors):
        t, i, b = tensors
        return t + scale * (i - b)

    return merge_streaming([target, instruct, base], add_vector, out_dir, instruct, dtype, max_shard_bytes,
                           first_only=lambda name: any(x in name for x in exclude))


def merge_lora(adapter: str | Path, out_dir: str | Path, base: str | None = None,
               dtype: str | None = None) -> Path:
    """Fold a LoRA adapter into its base model (``base`` defaults to the adapter's
    base_model_name_or_path)."""
    import torch  # torch, safetensors, peft: loaded when merging
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise MergeError(f"{adapter}: no adapter_config.json (not a LoRA adapter folder)")
    given = base
    base = base or PeftConfig.from_pretrained(str(adapter)).base_model_name_or_path
    if not base or is_model_path(base) and not Path(base).expanduser().is_dir():  # found before it loads
        raise MergeError(f"--base {base or '(none)'}: no such model folder" + (
            "" if given else f" (the base_model_name_or_path of {adapter}/adapter_config.json; give --base)"))
    out = check_out(out_dir, {"adapter": adapter, "--base": base})  # before the base model loads
    for src in (adapter, Path(base)):  # the tokenizer folder: its files (a chat template) land in the model
        if (src / "tokenizer_config.json").is_file():
            side_files(src)
            break
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype) if dtype else "auto")
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    with _written(out, {"method": "lora", "adapter": str(adapter), "base": base}) as tmp:
        merged.save_pretrained(tmp)
        for src in (adapter, Path(base)):  # the adapter's own tokenizer (SFT saves one) wins over the base's
            if (src / "tokenizer_config.json").is_file():
                AutoTokenizer.from_pretrained(str(src)).save_pretrained(tmp)
                break
    return out


def run_merge(method: str, models: list[str], output_dir: str, weights: list[float] | None = None,
              scale: float = 1.0, exclude: list[str] | None = None, base: str | None = None,
              dtype: str | None = None) -> Path:
    """Entry point of ``train merge``.

    ``method``: ``soup`` (models = checkpoints, optional ``weights``), ``chat_vector`` / ``chat-vector``
    (models = [target, instruct, base], ``scale``, ``exclude``), ``lora`` (models = [adapter], ``base``).
    Returns the output folder, a loadable ``from_pretrained`` checkpoint.
    """
    method = method.replace("-", "_")
    if method not in METHODS:
        raise MergeError(f"method must be one of {', '.join(METHODS)} (got {method!r})")
    for model in models:  # before any file is read: a missing one would surface as an OSError naming no input
        if not Path(model).expanduser().is_dir():
            raise MergeError(f"MODELS {model}: no such {'adapter' if method == 'lora' else 'model'} folder")
    if method == "soup":
        return soup(models, output_dir, weights, dtype)
    if method == "chat_vector":
        if len(models) != 3:
            raise MergeError(f"chat_vector needs 3 models: target, instruct, base (got {len(models)})")
        return chat_vector(*models, output_dir, scale=scale, exclude=exclude, dtype=dtype)
    if len(models) != 1:
        raise MergeError(f"lora needs exactly one adapter folder (got {len(models)})")
    return merge_lora(models[0], output_dir, base, dtype)

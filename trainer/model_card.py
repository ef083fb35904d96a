"""The model card TRL writes into a training run's ``output_dir`` (``README.md``): it names the base model.

TRL takes the base model from ``model.config._name_or_path`` and drops it when that is a local folder, so a
run from a local model (``tiny``, a merged SFT output, a Hub cache snapshot) got a card that read "a
fine-tuned version of [None](https://huggingface.co/None)". ``name_base_model`` makes every card the trainer
writes (TRL writes one with each checkpoint) name it instead: the Hub id where one is known (the recipe's
``model_name_or_path`` as given, or ``org/name`` of a Hub cache snapshot ``…/models--org--name/snapshots/…``),
linked and declared as the card's ``base_model``; else the local model's own name (the tiny model:
``SmolLM2-135M-Instruct``, the model its GGUF holds) in plain text, since no Hub page is known for it.

    name = recipe.model_args.model_name_or_path
    trainer = name_base_model(SFTTrainer(model=resolve_model(name), ...), name)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tansaku.core import safe_write
from tansaku.core.tiny_model import GGUF_FILE, TINY_MODEL_NAME

CARD = "README.md"
UNNAMED = "[None](https://huggingface.co/None)"  # what TRL's template renders when it has no base model
_SNAPSHOT = re.compile(r"models--([^/]+)--([^/]+)/snapshots/[^/]+$")


@dataclass(frozen=True)
class BaseModel:
    """How a card names the model a run started from: ``name`` always, ``hub_id`` when it is on the Hub."""

    name: str
    hub_id: str | None = None


def base_model(spec: str, resolved: str | None = None) -> BaseModel:
    """The base model of a run whose recipe says ``model_name_or_path: spec`` (``tiny``, a Hub id or a
    folder), loaded from ``resolved`` (what ``resolve_model`` made of it).

    >>> base_model("Qwen/Qwen3-0.6B")
    BaseModel(name='Qwen/Qwen3-0.6B', hub_id='Qwen/Qwen3-0.6B')
    >>> base_model("tiny", "/cache/models/smollm2-135m-instruct").name
    'SmolLM2-135M-Instruct'
    """
    path = Path(resolved or spec)
    if spec == "tiny" or path.name == TINY_MODEL_NAME:
        return BaseModel(GGUF_FILE.split(".")[0])  # dequantized from a Q4_1 GGUF: not the Hub's weights
    if not path.is_dir():
        return BaseModel(spec, spec)
    if found := _SNAPSHOT.search(path.resolve().as_posix()):
        return BaseModel(f"{found[1]}/{found[2]}", f"{found[1]}/{found[2]}")
    return BaseModel(path.resolve().name)


def fix_card(readme: Path, base: BaseModel) -> None:
    """Name ``base`` in the card at ``readme`` where TRL left it unnamed (a named card is left as it is)."""
    if not readme.is_file() or UNNAMED not in (text := readme.read_text(encoding="utf-8")):
        return
    from huggingface_hub import ModelCard

    card = ModelCard(text)
    if base.hub_id:
        card.data.base_model = base.hub_id
        card.text = card.text.replace(UNNAMED, f"[{base.hub_id}](https://huggingface.co/{base.hub_id})")
    else:
        card.text = card.text.replace(UNNAMED, f"`{base.name}` (a local model)")
    with safe_write.atomic_path(readme) as tmp:  # a fresh temp name renamed onto README.md
        card.save(tmp)


def name_base_model(trainer, spec: str, resolved: str | None = None):
    """``trainer`` (a TRL trainer), whose every ``create_model_card`` names the base model (``base_model``):
    the instance's method is wrapped, so SFT and GRPO trainers alike need no subclass for it."""
    base = base_model(spec, resolved)
    create = trainer.create_model_card

    def create_model_card(*args, **kwargs):
        create(*args, **kwargs)
        if trainer.is_world_process_zero():  # the process that wrote it
            fix_card(Path(trainer.args.output_dir) / CARD, base)

    trainer.create_model_card = create_model_card
    return trainer

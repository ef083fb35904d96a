"""The private parts of TRL that tansaku overrides or calls are there, with the parameters tansaku was written
against (TRL 1.16; ``pyproject.toml`` pins ``trl>=1.16,<1.17``).

Run: pytest tests/test_trl_private_api.py -q

TRL may change a private method in any release without notice. tansaku subclasses ``GRPOTrainer``
(``tansaku.trainer.rl.build_rl_trainer``: ``_get_train_sampler``, ``_generate_single_turn``, ``_generate``,
``_calculate_rewards``, ``_generate_and_score_completions``), calls ``_get_per_token_logps_and_entropies``
(``tansaku.trainer.sampler_logprobs``), reads and writes ``_metrics`` / ``_logs`` / ``_tokenizer``
(``tansaku.trainer.dynamic_sampling``, ``drift``), and imports helpers from modules TRL does not export
(``trl.trainer.utils``, ``trl.chat_template_utils``). Before raising the pin, run this file against the new
TRL: each failure names what moved, and the code that uses it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

from tansaku.trainer.cpu.lm_head import EXTRAS, GRPO_EXTRAS  # noqa: E402  (after the skip)

# (owner, name) → the parameter names tansaku was written against, and where tansaku uses it.
METHODS = {
    ("trl:GRPOTrainer", "_get_train_sampler"): (["self", "dataset"], "trainer/rl.py ResumableGRPOTrainer"),
    ("trl:GRPOTrainer", "_generate_single_turn"): (
        ["self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
        "trainer/rl.py ResumableGRPOTrainer (local sampler log-probs)"),
    ("trl:GRPOTrainer", "_generate"): (
        ["self", "prompts"], "trainer/rl.py ResumableGRPOTrainer (shared prefix)"),
    ("trl:GRPOTrainer", "_calculate_rewards"): (
        ["self", "inputs", "prompts", "completions", "completion_ids_list"],
        "trainer/rl.py ResumableGRPOTrainer (dynamic sampling)"),
    ("trl:GRPOTrainer", "_generate_and_score_completions"): (
        ["self", "inputs"], "trainer/rl.py ResumableGRPOTrainer, trainer/dynamic_sampling.py"),
    ("trl:GRPOTrainer", "_get_per_token_logps_and_entropies"): (
        ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
         "compute_aux_loss", "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
         "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids",
         "image_position_ids"],
        "trainer/sampler_logprobs.py trainer_logps"),
    ("trl:GRPOTrainer", "log"): (["self", "logs", "start_time"], "trainer/rl.py ResumableGRPOTrainer.log"),
    ("trl:GRPOTrainer", "training_step"): (
        ["self", "model", "inputs", "num_items_in_batch"],
        "trainer/rl.py ResumableGRPOTrainer.training_step"),
    ("trl.trainer.utils", "add_fused_lm_head"): (
        ["model", "temperature", "cast_lm_head_to_fp32", "outputs"], "trainer/drift.py StartDrift.load"),
    ("trl.trainer.utils", "nanstd"): (["tensor", "dim", "keepdim"], "trainer/dynamic_sampling.py"),
    ("trl.chat_template_utils", "get_training_chat_template"): (
        ["processing_class", "tokenizer"], "trainer/length.py"),
    ("trl.chat_template_utils", "has_generation_markers"): (["chat_template"], "trainer/length.py"),
}
# Attributes GRPOTrainer.__init__ sets that tansaku reads or replaces.
GRPO_ATTRIBUTES = {
    "_metrics": "trainer/drift.py, trainer/sampler_logprobs.py, trainer/dynamic_sampling.py (metrics logged)",
    "_logs": "trainer/rl.py log, trainer/dynamic_sampling.py (the completion log)",
    "_tokenizer": "trainer/dynamic_sampling.py (TRL's padding token)",
    "log_completions": "trainer/rl.py log (each round's completions written once)",
}
# Fields of TRL's fused LM head output that tansaku's CPU head fills (trainer/cpu/lm_head.py).
FUSED_OUTPUT_FIELDS = {"loss", "log_probs", "entropy", "is_top1", "label_mask"}


def resolve(owner: str):
    module, _, name = owner.partition(":")
    found = importlib.import_module(module)
    return getattr(found, name) if name else found


@pytest.mark.parametrize(("owner", "name"), list(METHODS), ids=[f"{o}.{n}" for o, n in METHODS])
def test_private_trl_method_has_the_parameters_tansaku_uses(owner, name):
    expected, used_by = METHODS[(owner, name)]
    where = resolve(owner)
    assert hasattr(where, name), (
        f"TRL {trl.__version__}: {owner}.{name} is gone; tansaku uses it in {used_by}. "
        "Adapt that code before raising the trl pin in pyproject.toml.")
    found = list(inspect.signature(getattr(where, name)).parameters)
    assert found == expected, (
        f"TRL {trl.__version__}: {owner}.{name} now takes {found}, tansaku was written against {expected} "
        f"({used_by}). Adapt that code, then this test, before raising the trl pin in pyproject.toml.")


@pytest.mark.parametrize("attribute", list(GRPO_ATTRIBUTES))
def test_grpo_trainer_still_sets_the_attributes_tansaku_reads(attribute):
    source = inspect.getsource(trl.GRPOTrainer.__init__)
    assert f"self.{attribute} =" in source, (
        f"TRL {trl.__version__}: GRPOTrainer.__init__ no longer sets self.{attribute}; tansaku uses it in "
        f"{GRPO_ATTRIBUTES[attribute]}. Adapt that code before raising the trl pin in pyproject.toml.")


def test_fused_lm_head_output_has_the_fields_tansaku_fills():
    from trl.trainer.utils import FusedCausalLMOutput

    fields = {f.name for f in dataclasses.fields(FusedCausalLMOutput)}
    assert FUSED_OUTPUT_FIELDS <= fields, (
        f"TRL {trl.__version__}: FusedCausalLMOutput lacks {sorted(FUSED_OUTPUT_FIELDS - fields)}, which "
        "trainer/cpu/lm_head.py fills. Adapt it before raising the trl pin in pyproject.toml.")


@pytest.mark.parametrize(("trainer", "extras"), [("SFTTrainer", EXTRAS), ("GRPOTrainer", GRPO_EXTRAS)])
def test_trainers_ask_trls_head_for_the_fields_tansakus_head_computes(trainer, extras):
    """tansaku's CPU head computes for a trainer only the fields its TRL head was asked for (the rest are
    None there too): a trainer that starts reading another field must be seen here first."""
    source = inspect.getsource(getattr(trl, trainer).__init__)
    asked = re.findall(r"add_fused_lm_head\((?:[^()]|\([^()]*\))*?outputs=\(([^)]*)\)", source)
    assert asked, f"TRL {trl.__version__}: {trainer}.__init__ no longer passes outputs= to add_fused_lm_head"
    fields = {name.strip().strip('"\'') for name in asked[0].split(",") if name.strip()}
    assert fields == {"log_probs", *extras}, (
        f"TRL {trl.__version__}: {trainer} asks its fused head for {sorted(fields)}; trainer/cpu/lm_head.py "
        f"computes log_probs and {list(extras)}. Adapt its extras before raising the trl pin.")


def test_the_pin_names_the_tested_minor_version():
    """pyproject's trl range is the one this file was checked against: raising it means rerunning it."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"trl>=1.16,<1.17"' in text
    major_minor = tuple(int(x) for x in trl.__version__.split(".")[:2])
    assert major_minor == (1, 16), f"installed TRL {trl.__version__} is outside the pinned range >=1.16,<1.17"

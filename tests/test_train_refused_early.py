"""``train sft`` / ``train rl`` refuse a bad recipe in one line (exit 2) before any model loads (issue 28).

Each case used to end in a traceback, or only after the model had loaded (an RL recipe's unknown reward weight
was checked after the readiness rollouts, still running at 180 s). The model loaders and the rollouts are
replaced by a trap that fails the test when reached; a good recipe does reach it (the control cases), so the
trap is where a model would load. No model loads here.

    pytest tests/test_train_refused_early.py -q
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
import transformers
from fixtures.recipe_args import section_arg
from typer.testing import CliRunner

from tansaku.cli import train_app
from tansaku.trainer import rl as rl_module
from tansaku.trainer import sft as sft_module

ROOT = Path(__file__).resolve().parents[1]
SFT_TINY = ROOT / "trainer" / "recipes" / "sft-tiny.yaml"
RL_TINY = ROOT / "trainer" / "recipes" / "rl-tiny.yaml"
QUICK_S = 60  # generous on a loaded 2-core machine; before the fix the RL cases ran minutes


class ModelLoaded(AssertionError):
    """Raised by the trap: a model loader or the rollouts that load one were reached."""


@pytest.fixture
def trap(monkeypatch):
    """Every way a run loads a model now raises ModelLoaded."""

    def loaded(*_a, **_k):
        raise ModelLoaded("a model loader was called")

    for owner, name in [(transformers.AutoModelForCausalLM, "from_pretrained"),
                        (transformers.PreTrainedModel, "from_pretrained"),
                        (sft_module, "build_sft_trainer"), (rl_module, "build_rl_trainer"),
                        (rl_module, "check_readiness"), (rl_module, "band_prompts")]:
        monkeypatch.setattr(owner, name, loaded)
    monkeypatch.delenv("TANSAKU_DEBUG", raising=False)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A folder that passes for a model until something loads it."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    return folder


def _train(kind: str, config: Path, args: list[str]):
    t0 = time.perf_counter()
    result = CliRunner().invoke(train_app, [kind, "--config", str(config), *args])
    return result, time.perf_counter() - t0


def _given(model_dir: Path, tmp_path: Path, args: list[str]) -> list[str]:
    """The model and output_dir every case sets, then the case's own ``--key value`` (the last one wins)."""
    return [a.replace("{tmp}", str(tmp_path)) for a in ["--model_name_or_path", str(model_dir),
                                                          "--output_dir", f"{tmp_path}/run", *args]]


def _refused(result, seconds: float, expected: str) -> None:
    assert not isinstance(result.exception, ModelLoaded), "checked only after a model loader was reached"
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert seconds < QUICK_S


WANDB_MISSING = importlib.util.find_spec("wandb") is None
SFT_CASES = {
    "model_missing": (["--model_name_or_path", "{tmp}/no-such-model"], "model not found"),
    "batch_size_0": (["--per_device_train_batch_size", "0"], "per_device_train_batch_size: must be >= 1"),
    "ratio_inf": (["--data", "[{path: examples/agentic_chat.jsonl, ratio: .inf}]"], "data.0.ratio: expected a finite"),
    "ratio_nan": (section_arg(SFT_TINY, "data", ratio=float("nan")), "data.0.ratio: expected a finite number"),
    "ratio_negative": (section_arg(SFT_TINY, "data", ratio=-1), "data.0.ratio: must be > 0"),
    "output_dir_a_file": (["--output_dir", "{tmp}/a_file"], "is a file"),
    "warmup_negative": (["--warmup_steps", "-3"], "SFTConfig: Got warmup_steps = -3.0"),
    "not_a_model_folder": (["--model_name_or_path", "{tmp}/not_a_model"], "is not a model folder"),
    "deep_value": (["--model_init_kwargs", '{"a": ' * 20_000 + "1" + "}" * 20_000], "nested too deeply"),
    "deep_section": (["--data", "[" * 20_000 + "]" * 20_000], "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(SFT_CASES))
def test_sft_refuses_before_a_model_loads(case, trap, model_dir, tmp_path):
    args, expected = SFT_CASES[case]
    (tmp_path / "a_file").write_text("mine", encoding="utf-8")
    (tmp_path / "not_a_model").mkdir()
    _refused(*_train("sft", SFT_TINY, _given(model_dir, tmp_path, args)), expected)
    assert (tmp_path / "a_file").read_text(encoding="utf-8") == "mine"


@pytest.mark.skipif(not WANDB_MISSING, reason="wandb is installed here")
def test_sft_refuses_a_logger_that_is_not_installed(trap, model_dir, tmp_path):
    args = _given(model_dir, tmp_path, ["--report_to", "wandb"])
    _refused(*_train("sft", SFT_TINY, args), "report_to: wandb is not installed; pip install wandb")


@pytest.mark.parametrize("text, expected", [
    ("model_name_or_path: tiny  # caf\xe9\n".encode("latin-1"), "is not UTF-8 text"),
    (("model_name_or_path: tiny\ndata: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(), "nested too deeply"),
    (b"model_name_or_path: tiny\n" + b"".join(b"  " * i + f"k{i}:\n".encode() for i in range(3_000)),
     "nested too deeply"),
], ids=["latin1", "deep_flow", "deep_block"])
def test_a_recipe_file_that_cannot_be_read_is_one_line(text, expected, trap, tmp_path):
    (tmp_path / "recipe.yaml").write_bytes(text)
    _refused(*_train("sft", tmp_path / "recipe.yaml", []), expected)


def _task(**changes) -> list[str]:
    return section_arg(RL_TINY, "tasks", **changes)


RL_CASES = {
    "unknown_reward": (_task(reward_weights={"no_such_reward": 1}), "reward_weights for unknown components"),
    "reward_weight_nan": (_task(reward_weights={"answer_reward": float("nan")}), "expected a finite number"),
    "abstention_too_big": (_task(abstention_weight=5), "abstention weight 5.0 must be in (0, 1.0]"),
    "abstention_negative": (_task(abstention_weight=-1), "abstention_weight: must be >= 0"),
    "unknown_task": (_task(name="no_such_task"), "unknown task"),
    "data_missing": (_task(data="{tmp}/missing.jsonl"), "cannot read"),
    "warmup_negative": (["--warmup_steps", "-3"], "GRPOConfig: Got warmup_steps = -3.0"),
    "model_missing": (["--model_name_or_path", "{tmp}/no-such-model"], "model not found"),
    "temperature_nan": (["--temperature", "nan"], "temperature: expected a finite number"),
    "trl_reserved_column": (_task(data="{tmp}/reserved.jsonl"), "are names TRL gives reward functions itself"),
    "batch_not_whole_prompts": (["--per_device_train_batch_size", "3", "--gradient_accumulation_steps", "1",
                                 "--steps_per_generation", "1"],
                                "GRPOConfig: generation_batch_size (3) must be divisible by num_generations (2)"),
}


@pytest.mark.parametrize("case", sorted(RL_CASES))
def test_rl_refuses_before_the_readiness_rollouts_load_a_model(case, trap, model_dir, tmp_path):
    args, expected = RL_CASES[case]
    rows = (ROOT / "examples" / "miniwiki_questions.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "reserved.jsonl").write_text("".join(json.dumps({**json.loads(line), "completions": 1}) + "\n"
                                                     for line in rows if line.strip()), encoding="utf-8")
    _refused(*_train("rl", RL_TINY, _given(model_dir, tmp_path, args)), expected)
    assert not (tmp_path / "run").exists(), "a refused run wrote its output_dir"


@pytest.mark.parametrize("kind, config", [("sft", SFT_TINY), ("rl", RL_TINY)])
def test_a_good_recipe_reaches_the_trap(kind, config, trap, model_dir, tmp_path):
    """The control: with nothing wrong, the run gets as far as loading the model, so the trap is in its path."""
    result, _ = _train(kind, config, _given(model_dir, tmp_path, []))
    assert isinstance(result.exception, ModelLoaded), (result.exit_code, result.stderr, result.exception)

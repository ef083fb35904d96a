"""`train sft` on the tiny model: exact label masks on a multi-turn tool conversation, loss goes down,
parameters move, and run_sft writes the model and recipe.

Run: pytest tests/test_trainer_sft.py -m slow
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "trainer" / "recipes" / "sft-tiny.yaml"
AGENTIC = ROOT / "tests" / "fixtures" / "sft" / "agentic.jsonl"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tiny_model_path):
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.sft import build_sft_trainer

    out = tmp_path_factory.mktemp("sft")
    # The first two agentic conversations (one and two searches), repeated: 3 steps must lower their loss.
    recipe = load_recipe(RECIPE, [
        "--output_dir", str(out), "--max_steps", "3", "--per_device_train_batch_size", "1", "--mix_size", "3",
        "--save_steps", "100", "--seed", "0", "--learning_rate", "2e-4",
        "--data", json.dumps([{"path": str(AGENTIC), "system_prompt": "あなたは検索エージェントです。", "max_rows": 2}]),
    ], kind="sft")
    yield build_sft_trainer(recipe)
    shutil.rmtree(out, ignore_errors=True)  # the module's checkpoint (~1.6 GB) outlives no test that reads it


def expected_trained_mask(tokenizer, text: str, input_ids: list[int]) -> list[bool]:
    """Independent of TRL and of the template's generation markers: a token is trained iff it lies inside
    an assistant turn's body, from after ``<|im_start|>assistant\\n`` through its ``<|im_end|>``."""
    spans = []
    for start in re.finditer(r"<\|im_start\|>assistant\n", text):
        end = text.index("<|im_end|>", start.end()) + len("<|im_end|>")
        spans.append((start.end(), end))
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoded["input_ids"] == input_ids, "TRL tokenized the conversation differently from the template text"
    return [any(a <= s and e <= b for a, b in spans) for s, e in encoded["offset_mapping"]]


def test_labels_cover_exactly_reasoning_tool_calls_and_answers(trainer):
    tokenizer = trainer.processing_class
    row = next(r for r in trainer.train_dataset)
    batch = trainer.data_collator([row])
    input_ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    conversations = [json.loads(line) for line in AGENTIC.read_text(encoding="utf-8").splitlines()[:2]]
    text = tokenizer.decode(input_ids)
    conv = next(c for c in conversations if c["messages"][0]["content"] in text)
    expected = expected_trained_mask(tokenizer, text, input_ids)
    got = [label != -100 for label in labels]
    mismatches = [(i, tokenizer.decode([t]), e, g) for i, (t, e, g) in enumerate(zip(input_ids, expected, got)) if e != g]
    assert not mismatches, f"label mask differs at {mismatches[:10]}"
    assert all(label in (-100, tok) for label, tok in zip(labels, input_ids))  # labels are the tokens themselves

    trained = tokenizer.decode([t for t, g in zip(input_ids, got) if g])
    untrained = tokenizer.decode([t for t, g in zip(input_ids, got) if not g])
    for message in conv["messages"]:
        if message["role"] == "assistant":
            assert message["reasoning_content"] in trained
            if message["content"]:
                assert message["content"] in trained and message["content"] not in untrained
            for call in message.get("tool_calls", []):
                assert json.dumps(call["function"]["arguments"], ensure_ascii=False) in trained
        else:  # user question and tool results: read, never learned
            assert message["content"] in untrained and message["content"] not in trained
    assert "あなたは検索エージェントです。" in untrained and "# Tools" in untrained
    assert trained.count("<|im_end|>") == sum(m["role"] == "assistant" for m in conv["messages"])


def test_three_steps_lower_the_loss_and_move_the_weights(trainer):
    import torch

    name, before = next((n, p.detach().clone()) for n, p in trainer.model.named_parameters() if "q_proj" in n)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3
    assert losses[-1] < losses[0], losses
    after = dict(trainer.model.named_parameters())[name]
    assert not torch.equal(before, after.detach())


def test_run_sft_with_lora_saves_an_adapter_and_the_recipe(tmp_path, tiny_model_path):
    from tansaku.trainer.recipes import read_recipe_file
    from tansaku.trainer.sft import run_sft

    data = [{**src, "max_rows": 1} for src in read_recipe_file(RECIPE)["data"]]
    result = run_sft(RECIPE, [
        "--output_dir", str(tmp_path), "--max_steps", "1", "--per_device_train_batch_size", "1", "--mix_size", "2",
        "--use_peft", "--lora_r", "4", "--lora_target_modules", "all-linear", "--data", json.dumps(data),
        "--max_length", "768", "--save_steps", "100",
    ])
    assert result["global_step"] == 1 and result["training_loss"] > 0
    assert (tmp_path / "adapter_config.json").is_file() and (tmp_path / "adapter_model.safetensors").is_file()
    assert (tmp_path / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "tansaku_recipe.json").read_text(encoding="utf-8"))
    assert saved["kind"] == "sft" and saved["config"] == str(RECIPE) and "--use_peft" in saved["args"]
    assert saved["model_args"]["lora_r"] == 4 and saved["training_args"]["max_steps"] == 1
    assert saved["script_args"]["data"][0]["max_rows"] == 1
    card = (tmp_path / "README.md").read_text(encoding="utf-8")  # TRL's model card, written with the checkpoint
    assert "huggingface.co/None" not in card and "SmolLM2-135M-Instruct" in card


def test_overlong_rows_are_fitted_not_truncated_in_the_trained_dataset(tmp_path, tiny_model_path):
    """Through TRL itself: with ``overlong: fit`` every tokenized training row is within max_length, its length
    is the one ``tansaku.trainer.length`` counted, and its final answer turn carries labels to ``<|im_end|>``."""
    from tansaku.trainer.data import as_trained, load_sources
    from tansaku.trainer.length import ELIDED, apply_overlong, count_tokens
    from tansaku.trainer.recipes import load_recipe
    from tansaku.trainer.sft import build_sft_trainer

    rows = [json.loads(line) for line in AGENTIC.read_text(encoding="utf-8").splitlines()[:2]]
    long = json.loads(json.dumps(rows[1], ensure_ascii=False))
    next(m for m in long["messages"] if m["role"] == "tool")["content"] += "資料" * 600
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [rows[0], long]), encoding="utf-8")
    recipe = load_recipe(RECIPE, ["--output_dir", str(tmp_path / "run"), "--data", json.dumps([{"path": str(path)}]),
                                  "--max_length", "700", "--overlong", "fit", "--mix_size", "2", "--max_steps", "1"],
                         kind="sft")
    trainer = build_sft_trainer(recipe)
    report = json.loads((tmp_path / "run" / "tansaku_data_report.json").read_text(encoding="utf-8"))
    assert report["sources"][0]["fitted"] == 1 and report["sources"][0]["dropped"] == {}
    tokenizer = trainer.processing_class
    seen_elided = False
    for example in trainer.train_dataset:
        ids = example["input_ids"]
        assert len(ids) <= 700
        text = tokenizer.decode(ids)
        seen_elided |= ELIDED in text
        labels = trainer.data_collator([example])["labels"][0].tolist()
        trained_text = tokenizer.decode([t for t, lab in zip(ids, labels) if lab != -100])
        final = rows[0]["messages"][-1]["content"] if rows[0]["messages"][0]["content"] in text \
            else long["messages"][-1]["content"]
        assert trained_text.rstrip().endswith(final + "<|im_end|>"), trained_text[-200:]
    assert seen_elided
    # TRL's tokenized lengths are exactly the counts the overlong policy used
    kept, _ = apply_overlong(as_trained(load_sources(recipe.script_args.data))[0][1], tokenizer, 700, "fit")
    assert {len(e["input_ids"]) for e in trainer.train_dataset} == {count_tokens(tokenizer, r) for r in kept}

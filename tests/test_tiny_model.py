"""The tiny model folder and its tool-calling chat template (TRL SFT masks, GRPO tool-call parsing).

Run: pytest tests/test_tiny_model.py -m slow
"""

from __future__ import annotations

import pytest

from tansaku.core import tiny_model

pytestmark = pytest.mark.slow

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "日本語の文書を検索する",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "検索語"}},
                "required": ["query"],
            },
        },
    }
]

CONVERSATION = [
    {"role": "system", "content": "あなたは検索エージェントです。"},
    {"role": "user", "content": "架空の山「星見岳」の標高は？"},
    {
        "role": "assistant",
        "reasoning_content": "まず検索する。",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "星見岳 標高"}}}],
    },
    {"role": "tool", "name": "search", "content": "星見岳は標高2345mの架空の山である。"},
    {"role": "assistant", "content": "2345メートルです。"},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def test_folder_has_weights_tokenizer_and_template(tiny_model_path):
    assert (tiny_model_path / "model.safetensors").is_file()
    assert (tiny_model_path / "tokenizer.json").is_file()
    assert tiny_model.is_prepared(tiny_model_path)


def test_interrupted_prepare_is_redone_and_finished_one_is_kept(tmp_path, monkeypatch):
    half_written = tmp_path / "models" / tiny_model.TINY_MODEL_NAME
    half_written.mkdir(parents=True)
    (half_written / "config.json").write_text("{broken", encoding="utf-8")  # no marker: interrupted
    out = tiny_model.tiny_model_dir(tmp_path)
    assert out == half_written and tiny_model.is_prepared(out)
    assert (out / "config.json").read_text(encoding="utf-8").startswith("{\n")
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "temp folder left behind"

    def must_not_run(*args, **kwargs):
        raise AssertionError("a prepared model folder was materialized again")

    monkeypatch.setattr(tiny_model, "_materialize", must_not_run)
    assert tiny_model.tiny_model_dir(tmp_path) == out


def test_template_renders_tools_reasoning_calls_and_responses(tokenizer):
    text = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert text.startswith("<|im_start|>system\nあなたは検索エージェントです。\n\n# Tools")
    assert '"name": "search"' in text and "日本語の文書を検索する" in text  # no \\u escapes
    assert "<think>\nまず検索する。\n</think>\n\n<tool_call>\n" in text
    assert '{"name": "search", "arguments": {"query": "星見岳 標高"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\n星見岳は標高2345mの架空の山である。\n</tool_response><|im_end|>" in text
    prompt = tokenizer.apply_chat_template(CONVERSATION[:2], add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n") and "# Tools" not in prompt


def test_assistant_mask_covers_reasoning_calls_answer_not_tool_results(tokenizer):
    out = tokenizer.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    untrained = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
    for piece in ("まず検索する。", '"arguments": {"query": "星見岳 標高"}', "2345メートルです。"):
        assert piece in trained
    assert trained.count("<|im_end|>") == 2  # each assistant turn learns to stop
    for piece in ("星見岳は標高2345m", "架空の山「星見岳」", "# Tools", "検索エージェント"):
        assert piece in untrained and piece not in trained


def test_trl_accepts_template_for_tools_and_assistant_only_loss(tokenizer):
    from trl.chat_template_utils import (
        has_generation_markers,
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        parse_response,
        supports_tool_calling,
    )

    assert has_generation_markers(tokenizer.chat_template)
    assert supports_tool_calling(tokenizer)
    assert is_chat_template_prefix_preserving(tokenizer)
    assert is_chat_template_stop_token_trained(tokenizer)
    # What GRPO does with a generated completion: parse tool calls with the stored response_template.
    prompt_ids = tokenizer.apply_chat_template(
        CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    generated = '<think>\n考える\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "星見岳"}}\n</tool_call><|im_end|>'
    parsed = parse_response(tokenizer, tokenizer(generated)["input_ids"], prefix=prompt_ids, tools=TOOLS)
    assert parsed["reasoning_content"] == "考える"
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "search", "arguments": {"query": "星見岳"}}}]


def test_sft_assistant_only_loss_and_grpo_tools_initialize(tiny_model_path, tmp_path):
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    rows = Dataset.from_list([{"messages": CONVERSATION, "tools": TOOLS}] * 2)
    sft = SFTTrainer(
        model=str(tiny_model_path),
        train_dataset=rows,
        args=SFTConfig(
            output_dir=str(tmp_path / "sft"), assistant_only_loss=True, max_steps=1,
            per_device_train_batch_size=2, use_cpu=True, report_to=[], save_strategy="no",
        ),
    )
    assert sft.chat_template is None  # our template was used as is, not swapped for a TRL one
    first = sft.train_dataset[0]
    trained = sft.processing_class.decode([i for i, lab in zip(first["input_ids"], first["labels"]) if lab != -100])
    assert "星見岳 標高" in trained and "2345メートルです。" in trained and "架空の山である" not in trained
    assert sft.train().training_loss > 0

    def search(query: str) -> str:
        """Search the documents.

        Args:
            query: words to look for
        """
        return "星見岳は標高2345m。"

    grpo = GRPOTrainer(
        model=str(tiny_model_path),
        reward_funcs=lambda completions, **kw: [1.0] * len(completions),
        train_dataset=Dataset.from_list([{"prompt": CONVERSATION[1:2]}] * 2),
        tools=[search],
        args=GRPOConfig(
            output_dir=str(tmp_path / "grpo"), use_cpu=True, num_generations=2,
            per_device_train_batch_size=2, max_completion_length=8, report_to=[],
        ),
    )
    assert grpo.chat_template is None  # prefix-preserving: kept our template
    assert grpo._tokenizer.response_template == tiny_model.RESPONSE_TEMPLATE

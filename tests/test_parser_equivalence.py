"""One parser for what a model writes: the same completions give the same tool calls, parse failures, tool
results and rewards through (a) the rollout runner, (b) ``train eval`` (``run_eval`` over the transformers
backend) and (c) TRL's ``GRPOTrainer(environment_factory=…)`` for one step.

Generation is scripted as TRL's own GRPO tests script it: ``GenerationMixin.generate`` is patched to append
fixed token ids, here on a tiny randomly initialised Llama (hidden 32, 2 layers) with the tiny model's
tokenizer and our chat template. So (b) and (c) read the very tokens a model would have produced, through
the transformers backend and through transformers' ``parse_response`` in TRL. One question per completion
kind: a good call, a call with broken JSON, an unknown tool, a direct ``{{answer}}``.

Before the one-parser change the broken-JSON call (``{name: "search", …,}``) was repaired by the backend into
a working search and answered correctly (reward 1), and the rollout runner fed the error back and let the
model answer; in TRL it is plain text and the episode ends with answer reward 0. This test catches both.

Run: pytest tests/test_parser_equivalence.py
"""

from __future__ import annotations

import json
import re

import pytest
from fixtures.envs.helpers import build_fixture_index, task_rows, tool_results

from tansaku.core.llm import ScriptedLLM, from_spec
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.evaluate import run_eval
from tansaku.envs.rewards import episode_stats
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.tasks import TASKS

TASK = TASKS["multihop_qa"]
SEARCH = '<tool_call>\n{"name": "search", "arguments": {"query": "月見坂", "size": 1}}\n</tool_call>'
BROKEN = '<tool_call>\n{name: "search", "arguments": {"query": "東京",}}\n</tool_call>'
UNKNOWN = '<tool_call>\n{"name": "browse", "arguments": {"url": "x"}}\n</tool_call>'
# question keyword → the completion for each turn (turn = tool results seen so far)
SCRIPTS = {
    "月見坂": ["<think>月見坂を検索する。</think>\n" + SEARCH, "<think>白砂市とわかった。</think>\n答えは{{白砂市}}です。"],
    # If anything repaired the call, the second turn would answer correctly: a difference the test sees.
    "第十九代": ["<think>検索する。</think>\n" + BROKEN, "<think>わかった。</think>\n{{黒松}}"],
    "研究船": ["<think>ブラウズする。</think>\n" + UNKNOWN, "<think>諦める。</think>\n{{わからない}}"],
    "白砂焼": ["<think>知っている。</think>\n答えは{{1978年}}です。"],
}
EXPECTED = {  # (tool calls, parse failures, tool results, rewards) per question keyword
    "月見坂": ([("search", {"query": "月見坂", "size": 1})], 0, ["doc_id"],
              {"answer_reward": 1.0, "format_reward": 1.0, "tool_call_reward": 1 / 3, "zh_mix_penalty": 0.0}),
    "第十九代": ([], 1, [],
               {"answer_reward": 0.0, "format_reward": 0.25, "tool_call_reward": 0.0, "zh_mix_penalty": 0.0}),
    "研究船": ([("browse", {"url": "x"})], 0, ["{'error': 'Tool browse not found.'}"],
              {"answer_reward": 0.0, "format_reward": 1.0, "tool_call_reward": 0.0, "zh_mix_penalty": 0.0}),
    "白砂焼": ([], 0, [], {"answer_reward": 1.0, "format_reward": 1.0, "tool_call_reward": 0.0, "zh_mix_penalty": 0.0}),
}
_USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)


def completion_for(question: str, turn: int) -> str:
    [script] = [s for keyword, s in SCRIPTS.items() if keyword in question]
    return script[min(turn, len(script) - 1)]


def scripted_client(request):
    """(a): the raw text, as any backend now returns it."""
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    return completion_for(question, len(tool_results(request)))


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return build_fixture_index(tmp_path_factory.mktemp("parser_index"))


@pytest.fixture(scope="module")
def rows():
    return [{k: v for k, v in row.items() if k != "aliases"} for row in task_rows("multihop")]  # ragged column


@pytest.fixture(scope="module")
def tiny_random_model(tiny_model_path, tmp_path_factory):
    """A randomly initialised 2-layer Llama with the tiny model's tokenizer and chat template, saved to disk."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_random")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def scripted_generate(tiny_random_model, monkeypatch):
    """Patch ``generate`` (as TRL's tests do) to append the scripted completion's token ids to each row."""
    import torch
    from transformers import AutoTokenizer
    from transformers.generation.utils import GenerationMixin

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model)

    def fake_generate(self, input_ids=None, attention_mask=None, **_kwargs):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = tokenizer.decode([t for t, m in zip(ids, mask) if m])
            text = completion_for(_USER_TURN.search(prompt).group(1), prompt.count("<tool_response>"))
            rows.append(tokenizer.encode(text + tokenizer.eos_token, add_special_tokens=False))
        width = max(map(len, rows))
        new = [r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(new, device=input_ids.device)], dim=1)

    monkeypatch.setattr(GenerationMixin, "generate", fake_generate)


def outcome(completion: list[dict], rewards: dict) -> tuple:
    """What must agree across the three paths: calls, parse failures, tool results, rewards."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for m in completion if m["role"] == "assistant"
             for c in m.get("tool_calls") or []]
    results = [m["content"] for m in completion if m["role"] == "tool"]
    return calls, episode_stats(completion).parse_errors, results, {k: round(v, 9) for k, v in rewards.items()}


def keyword(question: str) -> str:
    return next(k for k in SCRIPTS if k in question)


def check_expected(outcomes: dict) -> None:
    assert set(outcomes) == set(EXPECTED)
    for key, (calls, failures, results, rewards) in EXPECTED.items():
        got_calls, got_failures, got_results, got_rewards = outcomes[key]
        assert (got_calls, got_failures) == (calls, failures), key
        assert len(got_results) == len(results) and all(r in g for r, g in zip(results, got_results)), key
        assert got_rewards == pytest.approx(rewards), key


@pytest.fixture(scope="module")
def rollout(index_dir, rows):
    """(a) the rollout runner with a scripted client returning raw text: the reference outcomes."""
    trajectories = run_rollouts(ScriptedLLM(scripted_client), TASK, rows, make_environment_factory(TASK, index_dir),
                                quiet=True)
    for t in trajectories:
        assert t.parse_failures == episode_stats(t.completion).parse_errors
    assert [t.stop_reason for t in trajectories] == ["answer", "parse_error", "answer", "answer"]
    return {keyword(rows[t.row_index]["question"]): outcome(t.completion, t.rewards) for t in trajectories}


def test_rollout_runner_reads_completions_as_trl_does(rollout):
    check_expected(rollout)


def test_train_eval_over_the_transformers_backend_agrees(rollout, index_dir, rows, tiny_random_model,
                                                         scripted_generate, tmp_path):
    """(b) ``run_eval`` through the transformers backend, generation scripted at the token level."""
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    client = from_spec(f"transformers:{tiny_random_model}", cache=False)
    report = run_eval("multihop_qa", dataset, client, index_dir, k=1, out_dir=tmp_path / "eval")
    lines = (tmp_path / "eval" / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    evaluation = {keyword(rows[r["row_index"]]["question"]): outcome(r["messages"][r["n_prompt_messages"]:],
                                                                    r["rewards"]) for r in records}
    assert evaluation == rollout
    assert report["parse_failure_rate"] == pytest.approx(1 / 3)  # 1 broken of 3 attempted calls


@pytest.mark.slow  # ~1 min on 2 CPU cores: the loss scores every position against a 49k vocabulary
def test_one_grpo_step_with_environment_factory_agrees(rollout, index_dir, rows, tiny_random_model,
                                                       scripted_generate, tmp_path, monkeypatch):
    """(c) TRL parses the same tokens with the tokenizer's response template and runs the same tools."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    seen: dict[str, dict] = {}

    def recording(function, name):
        def reward(completions, question, **columns):
            values = function(completions, question=question, **columns)
            for q, completion, value in zip(question, completions, values):
                seen.setdefault(keyword(q), {"completion": completion, "rewards": {}})["rewards"][name] = value
            return values

        reward.__name__ = name
        return reward

    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=1, per_device_train_batch_size=8,
                      num_generations=2, max_completion_length=4096, max_tool_calling_iterations=2,
                      use_vllm=False, use_cpu=True, reward_weights=list(TASK.reward_weights.values()), report_to=[],
                      logging_steps=1, save_strategy="no", temperature=1.0)
    rewards = [recording(f, name) for f, name in zip(TASK.reward_functions(), TASK.reward_weights)]
    trainer = GRPOTrainer(model=str(tiny_random_model), processing_class=AutoTokenizer.from_pretrained(tiny_random_model),
                          args=args, train_dataset=Dataset.from_list(TASK.to_trl_rows(rows)), reward_funcs=rewards,
                          environment_factory=make_environment_factory(TASK, index_dir))
    trainer.train()
    grpo = {key: outcome(value["completion"], value["rewards"]) for key, value in seen.items()}
    assert grpo == rollout
    assert trainer.state.log_history[0]["tools/call_frequency"] == pytest.approx(2 / 4)  # search + browse, 4 prompts

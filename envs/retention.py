"""General-behaviour retention: how likely a model still finds plain chat answers after agentic training.

``train eval --task general --dataset examples/general_chat.jsonl --model transformers:runs/rl`` reads rows of
general chat (``messages`` ending in an assistant turn, or ``prompt`` + ``answer``) and reports the mean
per-token log-likelihood the model gives the reference answers, prompt as context, no system prompt:

    mean_token_logprob = Σ_rows Σ_answer-tokens log p(token | prompt, earlier tokens)
                         / (number of answer tokens)
    perplexity         = exp(−mean_token_logprob)

The answer tokens are what the chat template adds for the assistant turn (its text and end-of-turn token).

**Retention** compares a trained model with its base on the same references, best the base model's own
greedy answers (``self_answers``: "what the model used to say"):

    retention = exp(mean_token_logprob_after − mean_token_logprob_before)
              = perplexity_before / perplexity_after

1.0: the trained model gives the base's answers the same per-token likelihood (the base against itself is
exactly 1.0); 0.8: each answer token became 20 % less likely on (geometric) average.
``retention(before, after)`` computes it from two reports.

Needs the weights, so only ``transformers:PATH`` models (and model folders) work: an HTTP server or the vLLM
engine does not return the log-probs of a given text here.
"""

from __future__ import annotations

import math
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.core.tiny_model import tiny_model_dir

TASK = "general"


def resolve_model_dir(model) -> str:
    """``transformers:PATH`` / ``transformers:tiny`` / a folder → a folder; any other spec → one-line
    error."""
    if not isinstance(model, str):
        raise InputError("the general task needs a transformers:PATH model spec or a model folder")
    path = model.removeprefix("transformers:")
    if path == "tiny":
        return str(tiny_model_dir())
    if model.startswith("transformers:") or Path(model).is_dir():
        return path
    raise InputError(f"the general task reads token log-probs from the weights: use transformers:PATH or a "
                     f"model folder, not {model.split(':', 1)[0]}: specs (http/vllm/scripted cannot score a "
                     f"given text)")


def split_row(row: dict) -> tuple[list[dict], str]:
    """``(prompt messages without system turns, reference answer)`` of one row.

    >>> split_row({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    ...                         {"role": "assistant", "content": "a"}]})
    ([{'role': 'user', 'content': 'q'}], 'a')
    >>> split_row({"prompt": "q", "answer": "a"})
    ([{'role': 'user', 'content': 'q'}], 'a')
    """
    if row.get("messages"):
        messages = [m for m in row["messages"] if m.get("role") != "system"]
        if not messages or messages[-1].get("role") != "assistant" or len(messages) < 2:
            raise InputError(f"row {row.get('id', '?')}: messages must end in an assistant turn after a "
                             f"prompt")
        return [dict(m) for m in messages[:-1]], str(messages[-1].get("content") or "")
    if "prompt" in row and "answer" in row:
        prompt = row["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return [m for m in messages if m.get("role") != "system"], str(row["answer"])
    raise InputError(f"row {row.get('id', '?')}: needs `messages` ending in an assistant turn, or `prompt` + "
                     f"`answer`")


def _load(model, tokenizer=None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model, str):
        path = resolve_model_dir(model)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if tokenizer is None:
        raise InputError("pass the tokenizer along with a model object")
    return model.eval(), tokenizer


def encode(tokenizer, prompt: list[dict], answer: str) -> tuple[list[int], list[int]]:
    """Token ids of the rendered prompt (with the assistant header) and of the assistant turn after it."""
    prompt_text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": answer}], tokenize=False)
    # The template's own assistant turn (answer + end-of-turn), when it extends the prompt as it should.
    answer_text = full[len(prompt_text):].rstrip() if full.startswith(prompt_text) else \
        answer + (tokenizer.eos_token or "")
    return (tokenizer(prompt_text, add_special_tokens=False)["input_ids"],
            tokenizer(answer_text, add_special_tokens=False)["input_ids"])


def answer_loglik(model, rows: list[dict], batch_size: int = 4, tokenizer=None,
                  max_length: int = 2048) -> dict:
    """Mean per-token log-likelihood of each row's reference answer given its prompt.

    ``model``: a ``transformers:PATH`` spec, a folder, or a loaded causal LM (then pass ``tokenizer``).
    Returns ``{"mean_token_logprob", "perplexity", "tokens", "rows", "row_mean_logprob": [...]}``.
    """
    import torch

    model, tokenizer = _load(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    encoded = []
    for row in rows:
        prompt_ids, answer_ids = encode(tokenizer, *split_row(row))
        ids = (prompt_ids + answer_ids)[-max_length:]  # keep the answer; cut the prompt's start if too long
        encoded.append((ids, min(len(answer_ids), len(ids) - 1)))
    total, tokens, per_row = 0.0, 0, []
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(encoded), batch_size):
            batch = encoded[start:start + batch_size]
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (ids, _) in enumerate(batch):  # right padding: positions (and rotary phases) start at 0
                input_ids[i, :len(ids)] = torch.tensor(ids)
                mask[i, :len(ids)] = 1
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits.float()
            logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
            targets = input_ids[:, 1:].to(device)
            picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            for i, (ids, n_answer) in enumerate(batch):
                # token t is predicted at position t-1: the answer's n tokens end at len(ids)-1
                row_sum = picked[i, len(ids) - 1 - n_answer:len(ids) - 1].sum().item()
                total += row_sum
                tokens += n_answer
                per_row.append(row_sum / max(n_answer, 1))
    mean = total / max(tokens, 1)
    return {"mean_token_logprob": mean, "perplexity": math.exp(-mean), "tokens": tokens, "rows": len(rows),
            "row_mean_logprob": per_row}


def self_answers(model, rows: list[dict], max_new_tokens: int = 128, batch_size: int = 4,
                 tokenizer=None) -> list[dict]:
    """The rows with each reference answer replaced by the model's own greedy answer (``prompt`` +
    ``answer``)."""
    import torch

    model, tokenizer = _load(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    prompts = [split_row(row)[0] for row in rows]
    out = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            batch = [encode(tokenizer, p, "")[0] for p in prompts[start:start + batch_size]]
            width = max(map(len, batch))
            # left padding for generation: every row's next token comes right after its own prompt
            input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=device)
            mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=device)
            generated = model.generate(input_ids=input_ids, attention_mask=mask,
                                       max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
            for i, sequence in enumerate(generated[:, width:]):
                text = tokenizer.decode(sequence, skip_special_tokens=True).strip()
                out.append({**rows[start + i], "prompt": prompts[start + i], "answer": text,
                            "messages": None})
    return out


def retention(before: dict, after: dict) -> float:
    """exp(mean_token_logprob_after − mean_token_logprob_before) (= perplexity_before / perplexity_after).

    >>> retention({"mean_token_logprob": -2.0}, {"mean_token_logprob": -2.0})
    1.0
    >>> round(retention({"mean_token_logprob": -1.0}, {"mean_token_logprob": -1.5}), 4)
    0.6065
    """
    return math.exp(after["mean_token_logprob"] - before["mean_token_logprob"])


def general_report(model, rows: list[dict], batch_size: int = 4) -> dict:
    """The ``train eval --task general`` report: ``answer_loglik`` plus task and model."""
    if not rows:
        raise InputError("no rows to score")
    result = answer_loglik(model, rows, batch_size=batch_size)
    return {"task": TASK, "model": model if isinstance(model, str) else type(model).__name__, **result}

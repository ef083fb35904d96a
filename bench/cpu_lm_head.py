"""tansaku's CPU LM head against TRL's fused head on CPU, in one run: one training forward + backward of the
tiny model on a compact-row-shaped sequence, and the head alone.

    python bench/cpu_lm_head.py                 # 1,200 tokens, 530 of them prompt; 6 interleaved repeats
    python bench/cpu_lm_head.py --tokens 1200 --prompt 400 --repeats 8

Both sides are the same model copy patched by TRL's ``add_fused_lm_head`` (bf16 autocast over fp32 weights, as
``train sft`` / ``train rl`` run with ``bf16: true`` on a native-bf16 CPU); tansaku's side is then wrapped by
``tansaku.trainer.cpu.lm_head.score_labelled_positions``. Labels are -100 on the prompt, as in SFT and GRPO.
The two sides alternate within each repeat, so a change in the machine's speed hits both; the table gives the
median and the minimum of each and their ratio, with the largest log-prob and gradient differences.
Writes ``bench/results/cpu_lm_head.md``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM
from trl.kernels.chunked_logprob import ChunkedLogProbFunction
from trl.trainer.utils import add_fused_lm_head

from tansaku.core.tiny_model import tiny_model_dir
from tansaku.trainer.cpu.lm_head import labelled_scores, score_labelled_positions

RESULTS = Path(__file__).resolve().parent / "results"


def training_step(model, ids, labels, bf16: bool = True):
    """Seconds of one forward + backward, its log-probs and the gradient of the first layer's down projection."""
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    out.loss.backward()
    seconds = time.perf_counter() - start
    grad = model.model.layers[0].mlp.down_proj.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    return seconds, out.log_probs.detach(), grad


def head_only(weight, hidden, labels, ours: bool) -> float:
    """Seconds of the head's forward + backward alone: TRL's kernel over every position, or tansaku's over the
    labelled ones."""
    hidden = hidden.detach().requires_grad_()
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if ours:
            mask = labels != -100
            log_probs = labelled_scores(hidden[mask], weight, None, labels[mask])[0]
        else:
            log_probs = ChunkedLogProbFunction.apply(hidden, weight, None, labels.clamp(min=0), 1.0, 32768, None,
                                                     1.0, ("log_probs", "entropy"))[0]
    log_probs.sum().backward()
    weight.grad = None
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=1200)
    parser.add_argument("--prompt", type=int, default=530)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()

    torch.manual_seed(0)
    theirs = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32).train()
    add_fused_lm_head(theirs, outputs=("log_probs", "entropy"))
    ours = copy.deepcopy(theirs)
    score_labelled_positions(SimpleNamespace(model=ours))
    ids = torch.randint(100, theirs.config.vocab_size, (1, args.tokens))
    labels = ids.clone()
    labels[:, :args.prompt] = -100
    hidden = torch.randn(args.tokens - 1, theirs.config.hidden_size)
    head_labels = labels[0, 1:]
    weight = theirs.lm_head.weight

    times: dict[str, list[float]] = {k: [] for k in ("step TRL", "step tansaku", "head TRL", "head tansaku")}
    _, exact_lp, exact_grad = training_step(theirs, ids, labels, bf16=False)  # fp32 throughout: the reference
    errors = {}
    for _ in range(args.repeats):
        for name, model in (("step TRL", theirs), ("step tansaku", ours)):
            seconds, log_probs, grad = training_step(model, ids, labels)
            times[name].append(seconds)
            errors[name] = ((log_probs - exact_lp).abs().max().item(),
                            ((grad - exact_grad).norm() / exact_grad.norm()).item())
        times["head TRL"].append(head_only(weight, hidden, head_labels, ours=False))
        times["head tansaku"].append(head_only(weight, hidden, head_labels, ours=True))

    rows = []
    for part in ("step", "head"):
        trl_t, ours_t = times[f"{part} TRL"], times[f"{part} tansaku"]
        rows.append((part, statistics.median(trl_t), min(trl_t), statistics.median(ours_t), min(ours_t)))
    what = {"step": "training forward + backward (whole model)", "head": "LM head forward + backward alone"}
    lines = [f"# tansaku's CPU LM head against TRL's fused head ({args.tokens} tokens, {args.prompt} prompt, "
             f"{args.repeats} repeats)", "",
             "| part | TRL median s | TRL min s | tansaku median s | tansaku min s | tansaku / TRL (median) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {what[p]} | {a:.2f} | {b:.2f} | {c:.2f} | {d:.2f} | {c / a:.2f} |" for p, a, b, c, d in rows]
    lines += ["", "Against the same step in fp32 throughout (no autocast), the bf16 error of each side: largest "
                  "log-prob difference / relative gradient difference of layer 0's down projection:",
              *(f"- {name[5:]}: {lp:.2e} / {grad:.2e}" for name, (lp, grad) in errors.items())]
    text = "\n".join(lines) + "\n"
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "cpu_lm_head.md").write_text(text)


if __name__ == "__main__":
    main()

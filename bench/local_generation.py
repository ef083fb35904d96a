"""tansaku's local transformers backend against a plain ``model.generate`` loop over the same prompts, in one run.

    nice -n 15 python bench/local_generation.py           # sized for 3-5 minutes on 2 idle cores, fp32
    nice -n 15 python bench/local_generation.py --requests 8 --rows 2 --k 1 --max-tokens 32   # a quick check

Model: the tiny model (``tansaku.core.tiny_model``, SmolLM2-135M-Instruct), in ``fast_dtype()`` unless ``--dtype``.
Two stages, each one row of the table (``bench/results/local_generation.md``):

1. synthesis: ``--requests`` single-turn prompts as ``synth build egov --llm`` sends them — tansaku's own
   ``llm_generate`` over the eligible articles of ``examples/laws`` (17 of them: the list is cycled to reach
   ``--requests``), one ``client.chat`` call. Each prompt is ~1.1k tokens: on 2 fp32 cores prefill is most of
   the time, hence 16 prompts by default;
2. agent check: ``run_rollouts`` of ``MultihopQA`` (what ``synth build multihop --policy transformers:...``
   runs) on ``--rows`` questions × ``--k`` greedy tries, tools executed; the multihop dataset is built
   first into ``--work`` as demo.py builds it (scripted agent as the policy; reused when present).

tansaku's side is ``TransformersClient`` (``from_spec``, ``cache=False``, ``--batch-size``) behind a wrapper
that times only its ``chat`` calls. Right after each call the peer replays exactly that call's requests (for
the agent stage: turn by turn, each turn's whole context with its episode's tool schemas) through tokenizer +
``apply_chat_template`` + ``model.generate``: left padding, greedy, same dtype, batch size and
``max_new_tokens``. Interleaving call by call keeps a shared machine's changing load off the ratio; the last
column compares CPU time too (this process's), which another job's load stretches less than wall time.
Loading and one warm-up generate are excluded on both sides. Tokens are counted the same way on both: up to
and including the first ``<|im_end|>``, at most ``--max-tokens`` (this tokenizer's pad token *is*
``<|im_end|>``, so counting non-pad tokens would drop every finished answer's end token, which
``ChatResult.tokens`` counts). ``--ablate`` adds a row per stage: a second tansaku client with
``prefix_cache=False`` and ``turn_cache=False`` replaying every call too. ``--model`` takes a model that calls
the search tool (an SFT start), so the agent check runs several turns and the next turn's reuse of the last
call's caches (``tansaku.core.llm.turn_cache``) is measured too.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tansaku.core import jsontext
from tansaku.core.context import BuildContext
from tansaku.core.hardware import fast_dtype
from tansaku.core.llm import ChatRequest, from_spec
from tansaku.core.parsing import to_hf
from tansaku.core.tiny_model import tiny_model_dir
from tansaku.demo import EXAMPLES, SCRIPTED_AGENT
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.evaluate import load_rows
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.search import build_index, open_index
from tansaku.envs.tasks import MultihopQA
from tansaku.pipelines.corpus.build import build_corpus
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.egov.config import MIN_ARTICLE_CHARS
from tansaku.pipelines.egov.generate import llm_generate
from tansaku.pipelines.egov.parse import article_meta, iter_articles
from tansaku.pipelines.multihop.build import build_multihop
from tansaku.pipelines.multihop.config import MultihopConfig

RESULTS = Path(__file__).resolve().parent / "results"
WARMUP = [ChatRequest(messages=[{"role": "user", "content": "Hello"}], max_tokens=4)]
STARTED = time.perf_counter()


def log(message: str) -> None:
    """A progress line on stderr (a slow stage on a busy machine should show where it is)."""
    print(f"[{time.perf_counter() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


class Meter:
    """Wall seconds, CPU seconds (this process) and generated tokens of one side. CPU time is the steadier
    number on a shared machine: another job's load stretches wall time, not the work done."""

    def __init__(self):
        self.seconds, self.cpu, self.tokens = 0.0, 0.0, 0

    def measure(self, fn):
        """``fn()`` → (value, tokens): time it, count the tokens, return the value."""
        wall, cpu = time.perf_counter(), time.process_time()
        value, tokens = fn()
        self.seconds += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.tokens += tokens
        return value


class PlainLoop:
    """The peer: tokenizer + chat template + ``model.generate``, nothing else."""

    def __init__(self, model_dir: str, dtype: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()

    def render(self, req: ChatRequest) -> str:
        messages = to_hf(req.messages)
        if req.json_schema is not None:  # a hand-written loop has to ask for the JSON too: the same words
            hint = "Answer with one JSON object that follows this JSON schema:\n" + jsontext.dumps(req.json_schema)
            if messages and messages[0].get("role") == "system":
                messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{hint}"}, *messages[1:]]
            else:
                messages = [{"role": "system", "content": hint}, *messages]
        return self.tokenizer.apply_chat_template(messages, tools=req.tools or None, add_generation_prompt=True,
                                                  tokenize=False)

    def generate(self, texts: list[str], max_tokens: int) -> tuple[int, int, int]:
        """(generated tokens, prompt tokens, pad positions) of one left-padded greedy batch."""
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with self.torch.inference_mode():
            out = self.model.generate(**enc, max_new_tokens=max_tokens, do_sample=False, temperature=None,
                                      top_p=None, top_k=None, pad_token_id=self.tokenizer.pad_token_id)
        eos, generated = self.tokenizer.eos_token_id, 0
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            generated += min(row.index(eos) + 1 if eos in row else len(row), max_tokens)
        mask = enc["attention_mask"]
        return generated, int(mask.sum()), int(mask.numel() - mask.sum())


class Timed:
    """A client wrapper: times tansaku's ``chat`` calls only, records their requests, and replays each call at
    once through the peer (and the prefix-cache-off client, if any), so every side runs under the same load."""

    slots = None  # run_rollouts then batches turn by turn, as it does for the bare local backend

    def __init__(self, client, peer: PlainLoop, batch_size: int, ablation=None):
        self.client, self.peer, self.batch_size, self.ablation = client, peer, batch_size, ablation
        self.ours, self.theirs, self.ablated = Meter(), Meter(), Meter()
        self.calls, self.errors, self.prompt_tokens, self.padded = [], 0, 0, 0

    def chat(self, requests: list[ChatRequest]):
        # the same text on both sides, checked outside the timing
        assert all(self.peer.render(r) == self.client._prompt(r) for r in requests), "prompts differ"
        results = self.ours.measure(lambda: (rs := self.client.chat(requests), sum(r.tokens or 0 for r in rs)))
        self.errors += sum(1 for r in results if not r.ok)  # a failed batch would make a fast, empty row
        self.calls.append(list(requests))
        self.theirs.measure(lambda: (None, self._peer_call(requests)))
        if self.ablation is not None:
            self.ablated.measure(lambda: (None, sum(r.tokens or 0 for r in self.ablation.chat(requests))))
        return results

    def _peer_call(self, requests: list[ChatRequest]) -> int:
        generated = 0
        for b in range(0, len(requests), self.batch_size):
            tokens, prompt, padded = self.peer.generate([self.peer.render(r) for r in requests[b:b + self.batch_size]],
                                                        max(r.max_tokens for r in requests))
            generated, self.prompt_tokens, self.padded = generated + tokens, self.prompt_tokens + prompt, \
                self.padded + padded
        return generated


def egov_articles(n: int) -> list[dict]:
    """``n`` articles the egov LLM generator would get (not deleted, long enough), the list cycled."""
    eligible = [a for a in iter_articles([EXAMPLES / "laws"]) if isinstance(a, dict)
                and not article_meta(a).get("is_deleted") and len(a["text"]) >= MIN_ARTICLE_CHARS]
    return [eligible[i % len(eligible)] for i in range(n)]


def multihop_set(work: Path) -> tuple[Path, Path]:
    """(dataset, index) of demo.py's steps 2-3 (corpus, index, multihop with the scripted agent), in ``work``."""
    context = BuildContext(quiet=True)
    build_corpus(CorpusConfig(input=EXAMPLES / "miniwiki_large.jsonl"), work / "corpus", context)
    index = work / "index"
    if not (index / "tansaku_index.json").exists():  # written last by build_index
        build_index(work / "corpus", index)
    build_multihop(MultihopConfig(corpus=work / "corpus", policy=SCRIPTED_AGENT, index=index, limit=30, k=1, m=1),
                   work / "multihop", context)
    return work / "multihop", index


def row(stage: str, timed: Timed, ours: Meter) -> str:
    theirs, requests = timed.theirs, sum(len(c) for c in timed.calls)
    rate, peer_rate = ours.tokens / ours.seconds, theirs.tokens / theirs.seconds
    return (f"| {stage} | {requests} | {timed.prompt_tokens / requests:.0f} | {ours.tokens} | {ours.seconds:.1f} | "
            f"{rate:.1f} | {theirs.tokens} | {theirs.seconds:.1f} | {peer_rate:.1f} | {rate / peer_rate:.2f} | "
            f"{(ours.tokens / ours.cpu) / (theirs.tokens / theirs.cpu):.2f} |")


def shared_batches(client, calls: list[list[ChatRequest]], batch_size: int) -> str:
    """How many of the backend's batches start with one shared first turn (only those use its prefix cache)."""
    batches = [c[b:b + batch_size] for c in calls for b in range(0, len(c), batch_size)]
    shared = sum(1 for batch in batches if client._first_turn([client._prompt(r) for r in batch]))
    return f"{shared} of {len(batches)}"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-localgen"))
    parser.add_argument("--requests", type=int, default=16, help="synthesis prompts (egov generator)")
    parser.add_argument("--rows", type=int, default=2, help="multihop questions of the agent check")
    parser.add_argument("--k", type=int, default=2, help="greedy tries per question")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtype", default=fast_dtype())
    parser.add_argument("--model", help="a model folder (default: the tiny model); one that calls the search "
                        "tool (an SFT start) makes the agent check multi-turn")
    parser.add_argument("--ablate", action="store_true",
                        help="also replay every call with no KV cache reused (prefix_cache and turn_cache off)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    model_dir = args.model or tiny_model_dir()
    dataset, index = multihop_set(args.work)  # before any timing: building is not generating

    def client(reuse: bool = True):
        c = from_spec(f"transformers:{model_dir}", dtype=args.dtype, batch_size=args.batch_size, cache=False,
                      prefix_cache=reuse, turn_cache=reuse)
        c._load()  # loading is not generation: both sides start with the weights in memory
        c.chat(WARMUP)  # first-call costs (kernels, thread pools) paid outside the timing, as for the peer
        c._prefixes.clear()  # so no measured prefix is precomputed
        if c._turns is not None:
            c._turns.clear()  # nor a measured turn continued from the warm-up
        return c

    tansaku, ablation = client(), client(reuse=False) if args.ablate else None
    peer = PlainLoop(model_dir, args.dtype)
    peer.generate([peer.render(WARMUP[0])], 4)
    log("models loaded; synthesis")

    # 1. synthesis: the egov generator's own requests, one chat call
    synth = Timed(tansaku, peer, args.batch_size, ablation)
    llm_generate(synth, egov_articles(args.requests), seed=0, max_tokens=args.max_tokens)
    log(f"synthesis: tansaku {synth.ours.seconds:.1f}s, peer {synth.theirs.seconds:.1f}s; agent check")

    # 2. agent check: multi-turn rollouts, tools executed between turns (outside every timing)
    task = MultihopQA()
    rows = load_rows(dataset, split="train", limit=args.rows)
    agent = Timed(tansaku, peer, args.batch_size, ablation)
    trajectories = run_rollouts(agent, task, rows, make_environment_factory(task, open_index(str(index))), k=args.k,
                                max_tokens=args.max_tokens, temperature=0.0, score=False, quiet=True)
    log(f"agent check: tansaku {agent.ours.seconds:.1f}s, peer {agent.theirs.seconds:.1f}s")
    shared = [shared_batches(tansaku, t.calls, args.batch_size) for t in (synth, agent)]
    prefixes = sorted(v[0].shape[1] for v in tansaku._prefixes.values() if v)

    lines = ["| stage | requests | prompt tokens/request | tansaku tokens | tansaku s | tansaku tok/s | peer tokens | "
             "peer s | peer tok/s | tansaku/peer | tansaku/peer (CPU time) |", "|" + "---|" * 11]
    stages = ((f"synthesis (egov generator, {args.requests} prompts, 1 call)", synth),
              (f"agent check (multihop, {len(rows)} rows × k={args.k}, {len(agent.calls)} turns)", agent))
    for label, timed in stages:
        lines.append(row(label, timed, timed.ours))
    if ablation is not None:
        for label, timed in stages:
            lines.append(row(f"{label.split(' (')[0]}, tansaku reusing no KV cache", timed, timed.ablated))
    stops = sorted({t.stop_reason for t in trajectories})
    notes = [f"model {model_dir} ({args.dtype}), batch {args.batch_size}, max_tokens {args.max_tokens}, greedy",
             "peer padding (share of input positions): " + ", ".join(
                 f"{name} {t.padded / (t.padded + t.prompt_tokens):.1%}" for name, t in (("synthesis", synth),
                                                                                       ("agent", agent))),
             f"input-order batches sharing one first turn (before batching by first turn): synthesis {shared[0]}, "
             f"agent {shared[1]}; "
             f"cached first turns (tokens): {prefixes}",
             f"agent episodes stopped by {stops}; errors: synthesis {synth.errors}, agent {agent.errors}"]
    text = "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "local_generation.md").write_text(
        "# tansaku's transformers backend vs a plain generate loop (tiny model)\n\n" + text + "\n", encoding="utf-8")
    return text


if __name__ == "__main__":
    main()

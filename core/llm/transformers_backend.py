"""Local transformers backend (CPU): batched ``generate`` with left padding.

Spec: ``transformers:PATH``, ``transformers:ORG/NAME`` (a Hub id, through the HF cache) or
``transformers:tiny`` (the tiny test model from ``tansaku.core.tiny_model``).
Requests are grouped by sampling settings and generated ``batch_size`` at a time. The result's ``content``
is the decoded generation as it is (``<think>`` and ``<tool_call>`` blocks included, nothing repaired):
``tansaku.core.parsing`` reads it, as transformers' ``parse_response`` reads the same tokens in TRL.
Request messages may come in the wire form (arguments as JSON text); the chat template gets them in the
HF form (``to_hf``), as TRL renders them.

Each result carries ``tokens`` and ``entropy``: the mean entropy of the model's next-token distribution over
the tokens it generated (before temperature, so greedy and sampled runs measure the same thing), recorded
while generating (``EntropyRecorder``) — how near-deterministic a policy is, at no extra forward pass.

The first turn of a chat (the system prompt with the tool schemas: ~530 of the ~800 tokens of a compact agent
prompt, the same in every episode) is computed once and its KV cache reused by every batch that starts with it
(``prefix_cache=True``): each request's own part is left-padded after it, so a batch pays prefill only for
what differs. The split is made only where the tokens are the same either way (checked once per prefix). With
the cache on, a call's requests are batched by first turn (tool-description variants give a few) and by
length.

A call that continues the episodes of the call before it (the next turn of an agent loop: evaluation,
solvability checks, teacher rollouts) reuses that call's KV caches (``turn_cache=True``,
``tansaku.core.llm.turn_cache``): each request's longest token prefix in common with a row generated last call
is gathered from there, so the batch prefills only the tool result and what the template writes around it, not
the whole context again.

``json_schema`` is not enforced by decoding here (no guided decoding in plain ``generate``): the schema
is appended to the system prompt as an instruction and callers parse with ``parse_json``.
"""

from __future__ import annotations

import copy
import gc
import math
from collections import Counter

from tansaku.core import jsontext
from tansaku.core.parsing import to_hf
from tansaku.core.tiny_model import TINY_MODEL_NAME, tiny_model_dir

from .base import ChatRequest, ChatResult, LLMClient
from .identity import local_model_identity, resolve_model, weights_fingerprint  # noqa: F401 - re-exported


class EntropyRecorder:
    """A ``logits_processor`` that keeps each step's entropy of softmax(logits) per row; changes no logits.

    transformers applies custom processors before the temperature / top-p warpers, so this sees the model's
    own distribution.
    """

    def __init__(self):
        self.steps = []  # one [batch] float tensor per generated token
        self._table = None  # the steps stacked, [steps, batch], once generation is over

    def __call__(self, input_ids, scores):
        import torch  # torch: loaded with the model

        logp = torch.log_softmax(scores.float(), dim=-1)
        self.steps.append(-(logp.exp() * logp).sum(-1))
        return scores

    def mean(self, row: int, n_tokens: int) -> float | None:
        """Mean entropy over the first ``n_tokens`` generated tokens of ``row`` (None for none)."""
        n_tokens = min(n_tokens, len(self.steps))
        if n_tokens <= 0:
            return None
        if self._table is None:
            import torch  # torch: loaded with the model

            self._table = torch.stack(self.steps)
        return float(self._table[:n_tokens, row].mean())


class TransformersClient(LLMClient):
    backend = "transformers"

    def __init__(self, path: str, cache=None, batch_size: int = 8, dtype: str = "float32",
                 device: str = "cpu", prefix_cache: bool = True, turn_cache: bool = True):
        if path == "tiny":
            self.path, model_name = tiny_model_dir(), TINY_MODEL_NAME
        else:
            # A local folder or a Hub id (resolved through the HF cache; offline mode honoured).
            self.path = resolve_model(path)
            model_name = path
        super().__init__(model_name, cache,
                         params={"batch_size": batch_size, "dtype": dtype, "device": device})
        self.batch_size = batch_size
        self.dtype = dtype
        self.device = device
        self._model = None
        self._tokenizer = None
        self.prefix_cache = prefix_cache
        # first-turn text → (token ids, KV cache), None: unusable
        self._prefixes: dict[str, tuple | None] = {}
        self.turn_cache = turn_cache
        self._turns = None  # a TurnCache over the loaded model's weights: the last call's batches, kept

    def cache_identity(self) -> dict:
        # Keyed on where the weights are and what is in them, never on the folder's basename: ``A/model`` and
        # ``B/model``, or a model retrained in place (every demo's ``rl``), must not share answers. dtype
        # changes the numbers, batch size and device do not (beyond float noise).
        return {"backend": self.backend, **local_model_identity(self.path), "dtype": self.dtype}

    def _load(self):
        if self._model is None:
            import torch  # torch: loaded with the model
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from tansaku.core.llm.contiguous_head import contiguous_head_input

            tokenizer = AutoTokenizer.from_pretrained(self.path)
            # decoder-only batches: pad on the left so generation continues the text
            tokenizer.padding_side = "left"
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(self.path, dtype=getattr(torch, self.dtype))
            self._model, self._tokenizer = model.to(self.device).eval(), tokenizer
            contiguous_head_input(self._model)  # on CPU: no broadcast copy of the head at each prefill
            if self.turn_cache:
                from tansaku.core.llm.turn_cache import TurnCache  # torch: loaded with the model

                self._turns = TurnCache(self._model)
        return self._model, self._tokenizer

    def _prompt(self, req: ChatRequest) -> str:
        messages = to_hf(req.messages)  # templates render dict arguments (Qwen's would quote a JSON string)
        if req.json_schema is not None:
            hint = "Answer with one JSON object that follows this JSON schema:\n" + jsontext.dumps(
                req.json_schema)
            if messages and messages[0].get("role") == "system":
                messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{hint}"}, *messages[1:]]
            else:
                messages = [{"role": "system", "content": hint}, *messages]
        return self._tokenizer.apply_chat_template(
            messages, tools=req.tools or None, add_generation_prompt=True, tokenize=False)

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self._load()
        results: list[ChatResult | None] = [None] * len(requests)
        prompts: list[str | None] = [None] * len(requests)
        for i, req in enumerate(requests):
            try:
                prompts[i] = self._prompt(req)
            # one request the template cannot render (e.g. a tool call without a name)
            except Exception as exc:
                results[i] = ChatResult(error=f"{type(exc).__name__}: {exc}")
        batches = self._batches(requests, prompts)
        for n, ((temperature, top_p, seed), batch) in enumerate(batches):
            try:
                outs = self._generate_batch([requests[i] for i in batch], [prompts[i] for i in batch],
                                            temperature, top_p, seed, last=n == len(batches) - 1)
            except Exception as exc:  # one bad batch (e.g. a template error) must not sink the others
                outs = [ChatResult(error=f"{type(exc).__name__}: {exc}")] * len(batch)
            for i, out in zip(batch, outs):
                results[i] = out
        if self._turns is not None:
            self._turns.end_call()  # this call's caches are what its episodes' next turn reuses
        return results  # type: ignore[return-value]

    def _batches(self, requests: list[ChatRequest],
                 prompts: list[str | None]) -> list[tuple[tuple, list[int]]]:
        """Batches of request indexes, ``batch_size`` at most, one sampling setting each. With the prefix
        cache, requests are grouped by first turn too (episodes drawing among tool-description variants would
        otherwise mix system prompts in a batch, and a mixed batch shares no cached turn), and sorted by
        length inside a group, so a batch pads to its own longest prompt, not the call's. Without it, batches
        keep the input order (what an evaluation protocol fixed before this grouping sees). A first turn no
        other request shares (a chat without a system prompt starts with its own user turn) is no prefix to
        cache: those requests batch together in input order, as without the cache, never one per batch. Nor
            does grouping
        add batches: when it would, the call's requests batch in input order."""
        renderable = [i for i, p in enumerate(prompts) if p is not None]
        firsts = {i: self._first_turn([prompts[i]]) if self.prefix_cache else "" for i in renderable}
        seen = Counter(firsts.values())
        firsts = {i: first if seen[first] > 1 else "" for i, first in firsts.items()}
        # Each batch is a run of decode steps: split by first turn only where that adds no batch (4 episodes
        # over 2 description variants are one batch of 4, not two of 2 that each decode as long).
        group_sizes = Counter(firsts.values()).values()
        if (sum(math.ceil(n / self.batch_size) for n in group_sizes)
                > math.ceil(len(firsts) / self.batch_size)):
            firsts = dict.fromkeys(firsts, "")
        groups: dict[tuple, list[int]] = {}
        for i, req in enumerate(requests):
            if prompts[i] is None:  # not renderable: already answered with its error
                continue
            groups.setdefault((req.temperature, req.top_p, req.seed, firsts[i]), []).append(i)
        batches = []
        for (temperature, top_p, seed, first), indices in groups.items():
            if first:
                indices = sorted(indices, key=lambda i: len(prompts[i]))
            batches += [((temperature, top_p, seed), indices[start:start + self.batch_size])
                        for start in range(0, len(indices), self.batch_size)]
        return batches

    def _first_turn(self, prompts: list[str]) -> str:
        """The text up to the end of the first turn (the first end-of-turn token) when every prompt starts
        with it, else ''."""
        end = self._tokenizer.eos_token
        cut = prompts[0].find(end) if end else -1
        if cut <= 0:
            return ""
        prefix = prompts[0][:cut + len(end)]
        return prefix if all(p.startswith(prefix) for p in prompts) else ""

    def _prefix_kv(self, prefix: str, probe: str):
        """(ids, KV cache) of ``prefix``, computed once; None when tokenizing prefix and rest apart would give
        other tokens than tokenizing ``probe`` (a prompt starting with it) whole."""
        import torch  # torch: loaded with the model

        if prefix not in self._prefixes:
            tokenizer = self._tokenizer
            ids = (tokenizer(prefix, add_special_tokens=False, return_tensors="pt")["input_ids"]
                   .to(self.device))
            rest = tokenizer(probe[len(prefix):], add_special_tokens=False)["input_ids"]
            whole = tokenizer(probe, add_special_tokens=False)["input_ids"]
            if ids[0].tolist() + rest != whole:
                self._prefixes[prefix] = None
            else:
                with torch.inference_mode():
                    kv = self._model(input_ids=ids, use_cache=True).cache
                if len(self._prefixes) >= 8:  # a few system prompts (description variants) at a time
                    self._prefixes.pop(next(iter(self._prefixes)))
                self._prefixes[prefix] = (ids, kv)
        return self._prefixes[prefix]

    def _inputs(self, prompts: list[str], last: bool = True) -> dict:
        """``generate`` inputs: the rows' caches from the last call, gathered (``turn_cache``); else the
        shared first turn from its KV cache and each prompt's rest left-padded after it; else (no shared first
        turn, or ``prefix_cache`` off) the whole prompts left-padded. ``last``: the call's last batch, after
        which the last call's caches are freed, before this batch generates (one turn's keys and values less
        at the peak)."""
        import torch  # torch: loaded with the model

        tokenizer = self._tokenizer
        # episodes generated last call: their caches, gathered
        if self._turns is not None and self._turns.kept:
            from tansaku.core.llm.turn_cache import continuing_layout  # torch: loaded with the model

            rows = [torch.tensor(ids, device=self.device)
                    for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]
            plan = self._turns.plan(rows)
            gathered = self._turns.gathered(plan) if plan is not None else None
            if last:
                self._turns.release()
            if plan is not None:
                ids, mask = continuing_layout(rows, plan)
                return {"input_ids": ids, "attention_mask": mask, "cache": gathered}
        prefix = self._first_turn(prompts) if self.prefix_cache else ""
        cached = self._prefix_kv(prefix, prompts[0]) if prefix else None
        if cached is None:
            # The chat template already wrote the special tokens; do not add a BOS twice.
            return dict(tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
                        .to(self.device))
        ids, kv = cached
        rest = tokenizer([p[len(prefix):] for p in prompts], return_tensors="pt", padding=True,
                         add_special_tokens=False).to(self.device)
        n = len(prompts)
        past = copy.deepcopy(kv)
        past.batch_repeat_interleave(n)
        # Padding between the cached turn and the rest: the mask hides it and generate numbers positions from
        # the mask, so every row sees its own text at the positions it would have unpadded.
        return {"input_ids": torch.cat([ids.expand(n, -1), rest["input_ids"]], dim=1),
                "attention_mask": torch.cat([torch.ones(n, ids.shape[1], dtype=rest["attention_mask"].dtype,
                                                        device=self.device), rest["attention_mask"]], dim=1),
                "cache": past}

    def _generate_batch(self, reqs: list[ChatRequest], prompts: list[str], temperature: float, top_p: float,
                        seed, last: bool = True) -> list[ChatResult]:
        import torch  # torch: loaded with the model

        from tansaku.core.llm.growing_cache import growing_cache  # transformers: loaded with the model
        from tansaku.core.llm.turn_cache import end_token_ids

        model, tokenizer = self._model, self._tokenizer
        enc = self._inputs(prompts, last)
        enc["cache"] = growing_cache(model.config, enc.get("cache"))  # decode appends in place
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {
            "do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        if seed is not None:
            torch.manual_seed(seed)
        entropy = EntropyRecorder()
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max(r.max_tokens for r in reqs),
                                 pad_token_id=tokenizer.pad_token_id, logits_processor=[entropy], **sampling)
        if self._turns is not None:  # generate filled enc["cache"] in place
            # the tokenizer's: where results are cut too
            ends = [*end_token_ids(model), tokenizer.eos_token_id]
            self._turns.keep(enc["cache"], enc["input_ids"], enc["attention_mask"], out,
                             [e for e in ends if e is not None])
        results = []
        for b, (row, req) in enumerate(zip(out[:, enc["input_ids"].shape[1]:], reqs)):
            ids = row.tolist()
            stop = tokenizer.eos_token_id
            finish = "stop" if stop in ids[:req.max_tokens] else "length"
            ids = ids[:ids.index(stop) + 1] if stop in ids else ids  # the end token was generated too
            ids = ids[:req.max_tokens]  # the batch ran to the longest request's budget
            results.append(ChatResult(content=tokenizer.decode(ids, skip_special_tokens=True),
                                      finish_reason=finish,
                                      tokens=len(ids), entropy=entropy.mean(b, len(ids))))
        return results

    def close(self) -> None:
        """Drop the model and tokenizer; their memory goes back once nothing else holds them (a later
        ``chat`` loads them again). ``run_eval`` closes the clients it made from a spec."""
        self._model = self._tokenizer = None
        self._prefixes.clear()
        self._turns = None
        # generate() can leave cycles (caches, hooks) that would keep the weights alive until later
        gc.collect()

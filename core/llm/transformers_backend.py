"""Local transformers backend (CPU): batched ``generate`` with left padding.

Spec: ``transformers:PATH``, ``transformers:ORG/NAME`` (a Hub id, through the HF cache) or
``transformers:tiny`` (the tiny test model from ``tansaku.core.tiny_model``).
Requests are grouped by sampling settings and generated ``batch_size`` at a time. The result's ``content``
is the decoded generation as it is (``<think>`` and ``<tool_call>`` blocks included, nothing repaired):
``tansaku.core.parsing`` reads it, as transformers' ``parse_response`` reads the same tokens in TRL.
Request messages may come in the wire form (arguments as JSON text); the chat template gets them in the
HF form (``to_hf``), as TRL renders them.

``json_schema`` is not enforced by decoding here (no guided decoding in plain ``generate``): the schema
is appended to the system prompt as an instruction and callers parse with ``parse_json``.
"""

from __future__ import annotations

import gc
import json

from tansaku.core.parsing import to_hf

from .base import ChatRequest, ChatResult, LLMClient
from .identity import local_model_identity, resolve_model, weights_fingerprint  # noqa: F401 - re-exported


class TransformersClient(LLMClient):
    backend = "transformers"

    def __init__(self, path: str, cache=None, batch_size: int = 8, dtype: str = "float32", device: str = "cpu"):
        if path == "tiny":
            from tansaku.core.tiny_model import TINY_MODEL_NAME, tiny_model_dir

            self.path, model_name = tiny_model_dir(), TINY_MODEL_NAME
        else:
            # A local folder or a Hub id (resolved through the HF cache; offline mode honoured).
            self.path = resolve_model(path)
            model_name = path
        super().__init__(model_name, cache, params={"batch_size": batch_size, "dtype": dtype, "device": device})
        self.batch_size = batch_size
        self.dtype = dtype
        self.device = device
        self._model = None
        self._tokenizer = None

    def cache_identity(self) -> dict:
        # Keyed on where the weights are and what is in them, never on the folder's basename: ``A/model`` and
        # ``B/model``, or a model retrained in place (every demo's ``rl``), must not share answers. dtype
        # changes the numbers, batch size and device do not (beyond float noise).
        return {"backend": self.backend, **local_model_identity(self.path), "dtype": self.dtype}

    def _load(self):
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.path)
            tokenizer.padding_side = "left"  # decoder-only batches: pad on the left so generation continues the text
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(self.path, dtype=getattr(torch, self.dtype))
            self._model, self._tokenizer = model.to(self.device).eval(), tokenizer
        return self._model, self._tokenizer

    def _prompt(self, req: ChatRequest) -> str:
        messages = to_hf(req.messages)  # templates render dict arguments (Qwen's would quote a JSON string)
        if req.json_schema is not None:
            hint = "Answer with one JSON object that follows this JSON schema:\n" + json.dumps(
                req.json_schema, ensure_ascii=False)
            if messages and messages[0].get("role") == "system":
                messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{hint}"}, *messages[1:]]
            else:
                messages = [{"role": "system", "content": hint}, *messages]
        return self._tokenizer.apply_chat_template(
            messages, tools=req.tools or None, add_generation_prompt=True, tokenize=False)

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self._load()
        groups: dict[tuple, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault((req.temperature, req.top_p, req.seed), []).append(i)
        results: list[ChatResult | None] = [None] * len(requests)
        for (temperature, top_p, seed), indices in groups.items():
            for start in range(0, len(indices), self.batch_size):
                batch = indices[start:start + self.batch_size]
                try:
                    outs = self._generate_batch([requests[i] for i in batch], temperature, top_p, seed)
                except Exception as exc:  # one bad batch (e.g. a template error) must not sink the others
                    outs = [ChatResult(error=f"{type(exc).__name__}: {exc}")] * len(batch)
                for i, out in zip(batch, outs):
                    results[i] = out
        return results  # type: ignore[return-value]

    def _generate_batch(self, reqs: list[ChatRequest], temperature: float, top_p: float, seed) -> list[ChatResult]:
        import torch

        model, tokenizer = self._model, self._tokenizer
        prompts = [self._prompt(r) for r in reqs]
        # The chat template already wrote the special tokens; do not add a BOS twice.
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {
            "do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        if seed is not None:
            torch.manual_seed(seed)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max(r.max_tokens for r in reqs),
                                 pad_token_id=tokenizer.pad_token_id, **sampling)
        results = []
        for row, req in zip(out[:, enc["input_ids"].shape[1]:], reqs):
            ids = row.tolist()
            stop = tokenizer.eos_token_id
            finish = "stop" if stop in ids[:req.max_tokens] else "length"
            ids = ids[:ids.index(stop)] if stop in ids else ids
            ids = ids[:req.max_tokens]  # the batch ran to the longest request's budget
            results.append(ChatResult(content=tokenizer.decode(ids, skip_special_tokens=True), finish_reason=finish))
        return results

    def close(self) -> None:
        """Drop the model and tokenizer; their memory goes back once nothing else holds them (a later
        ``chat`` loads them again). ``run_eval`` closes the clients it made from a spec."""
        self._model = self._tokenizer = None
        gc.collect()  # generate() can leave cycles (caches, hooks) that would keep the weights alive until later

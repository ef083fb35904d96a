"""vLLM offline engine backend (GPU). Spec: ``vllm:MODEL`` (a hub id or a local folder).

Kept thin on purpose: vLLM cannot start on the CPU machines tansaku is developed on ("Device string
must not be empty"), so the test suite runs this file against a stand-in ``vllm`` module
(``tests/fixtures/fake_vllm.py``); it uses only vLLM's public ``LLM.chat`` API. All requests with the same
tools go to one ``LLM.chat`` call (vLLM batches them itself) with one ``SamplingParams`` per request. JSON
schemas use guided decoding: ``StructuredOutputsParams`` (vLLM ≥ 0.11) or ``GuidedDecodingParams`` (older).
The result's ``content`` is the generated text as it is; ``tansaku.core.parsing`` reads it (no parsing or
repair here).

Engine arguments (``VLLMClient("org/m", tensor_parallel_size=8, max_model_len=16384)``; ``--llm-option`` on
the command line, ``judge.engine`` in an RL recipe) are checked by name when the client is made
(``tansaku.core.llm.vllm_engine``): against vLLM's ``EngineArgs``, or without vLLM against the common names,
then refused because vLLM is missing. They are part of the cache identity and of the manifest's ``llm``
(``describe()["params"]["engine"]``), with sorted keys.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

from .base import ChatRequest, ChatResult, LLMClient
from .identity import cached_snapshot, is_hub_id, local_model_identity
from .vllm_engine import check_engine_options, require_vllm


class VLLMClient(LLMClient):
    backend = "vllm"
    # a stage hands it a whole chunk per call (thousands of prompts): vLLM schedules them
    large_batches = True

    def __init__(self, model: str, cache=None, **engine_kwargs):
        # An unknown name is refused first (it is wrong on any machine), then a machine without vLLM.
        engine_kwargs = check_engine_options(engine_kwargs)
        require_vllm(model, engine_kwargs)
        super().__init__(model, cache, params={"engine": engine_kwargs})
        self.engine_kwargs = engine_kwargs
        self._llm = None

    def cache_identity(self) -> dict:
        # A local folder: its resolved path and weights; a Hub id: the cached snapshot (its commit) when there
        # is one. Engine settings (dtype, quantization, max_model_len…) change answers, so they are keyed too.
        folder = Path(self.model).expanduser()
        if not folder.exists() and is_hub_id(self.model):
            folder = cached_snapshot(self.model) or folder
        weights = local_model_identity(folder) if folder.exists() else {"hub_id": self.model}
        return {"backend": self.backend, "model": self.model, **weights, "engine": self.engine_kwargs}

    def _engine(self):
        if self._llm is None:
            from vllm import LLM  # lazy: vllm pulls CUDA torch and needs a GPU

            self._llm = LLM(model=self.model, **self.engine_kwargs)
        return self._llm

    def close(self) -> None:
        """Drop the engine so its GPU memory can go back (``train rl``'s readiness check closes its engine
        before a colocated trainer starts its own)."""
        self._llm = None
        gc.collect()
        try:
            import torch  # vllm, CUDA torch: GPU only, loaded with the engine

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass
        super().close()

    @staticmethod
    def _sampling_params(req: ChatRequest):
        from vllm import SamplingParams  # vllm, CUDA torch: GPU only, loaded with the engine

        kwargs = {"max_tokens": req.max_tokens, "temperature": req.temperature, "top_p": req.top_p,
                  "seed": req.seed}
        if req.json_schema is not None:
            try:
                from vllm.sampling_params import StructuredOutputsParams  # vllm: GPU only

                kwargs["structured_outputs"] = StructuredOutputsParams(json=req.json_schema)
            except ImportError:
                from vllm.sampling_params import GuidedDecodingParams  # an older vllm's name

                kwargs["guided_decoding"] = GuidedDecodingParams(json=req.json_schema)
        return SamplingParams(**kwargs)

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        llm = self._engine()
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):  # LLM.chat takes one tools list per call
            groups.setdefault(json.dumps(req.tools, sort_keys=True), []).append(i)
        results: list[ChatResult | None] = [None] * len(requests)
        for indices in groups.values():
            reqs = [requests[i] for i in indices]
            outputs = llm.chat([r.messages for r in reqs], [self._sampling_params(r) for r in reqs],
                               tools=reqs[0].tools or None, use_tqdm=False)
            for i, out in zip(indices, outputs):
                completion = out.outputs[0]
                results[i] = ChatResult(content=completion.text, finish_reason=completion.finish_reason)
        return results  # type: ignore[return-value]

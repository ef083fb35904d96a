"""On CPU, a generating model's LM head is fed a contiguous input.

    from tansaku.core.llm.contiguous_head import contiguous_head_input
    contiguous_head_input(model)   # the transformers backend and train rl's rollout models do this

At each prefill, transformers scores only the last position: ``lm_head(hidden_states[:, -1:, :])``. On a batch
of more than one row that slice is a view that is not contiguous, and torch's ``linear`` then takes the
``matmul`` path that broadcasts the ``[vocab, hidden]`` weight over the batch: it materialises a
``[rows, hidden, vocab]`` copy of the head and runs a ``bmm``. For 16 rows × 576 × 49k vocab in bf16 that is
2.1 s on the 2-core CPU instead of 8 ms for the same product on a contiguous copy of the 16 hidden states
(``bench/results/gspo_profile_efficacy.md``: seconds of every 16-episode rollout round, one prefill per
turn). Copying the input first gives the same numbers through the ordinary ``mm``. Other devices keep the
head as it is.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def _contiguous_linear(self: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    return F.linear(hidden.contiguous(), self.weight, self.bias)


def contiguous_head_input(model) -> bool:
    """Have ``model``'s output embedding (a plain ``nn.Linear`` on CPU) copy a non-contiguous input before its
    product; returns whether it does. An instance attribute, bound to the head: a deep copy of the model (the
    bf16 generation copy) gets its own, bound to the copied head.

    >>> head = torch.nn.Linear(4, 6, bias=False)
    >>> model = types.SimpleNamespace(get_output_embeddings=lambda: head)
    >>> contiguous_head_input(model)
    True
    >>> hidden = torch.randn(3, 5, 4)[:, -1:, :]
    >>> torch.equal(head(hidden), hidden.contiguous() @ head.weight.T)
    True
    """
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.weight.device.type != "cpu":
        return False
    head.forward = types.MethodType(_contiguous_linear, head)
    return True

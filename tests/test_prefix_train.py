"""The shared-prompt training forward (``trainer/cpu/prefix_train.py``): micro-batches over the shared tokens' cut
cache, plus one flush before the optimizer step, give TRL's log-probs and TRL's summed gradients (fp32: to
rounding); calls it cannot serve take the full forward.

Run: pytest tests/test_prefix_train.py -q
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

from tansaku.trainer.cpu.lm_head import score_labelled_positions

SHARED = 36  # the system turn + tool schemas every prompt begins with
WIDTH = 30  # the rollout batch's left-padded prompt width beyond the shared tokens


def _pair():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    theirs, ours = model, copy.deepcopy(model)
    shared = score_labelled_positions(SimpleNamespace(model=ours, temperature=0.9), share_prefix=True)
    score_labelled_positions(SimpleNamespace(model=theirs, temperature=0.9))
    return theirs, ours, shared


def _rollouts(prompt_lengths, completion_lengths, generations=1):
    """A rollout batch as TRL lays it out: [left padding][prompt][completion][right padding], labels on the
    completion only; each prompt ``generations`` times in a row (a GRPO group)."""
    head = torch.randint(3, 300, (SHARED,))
    prompts, masks, rows = [], [], []
    questions = [torch.randint(3, 300, (own,)) for own in prompt_lengths[::generations]]
    for k, (own, done) in enumerate(zip(prompt_lengths, completion_lengths)):
        prompt = torch.cat([torch.zeros(WIDTH - own, dtype=torch.long), head, questions[k // generations]])
        prompts.append(prompt)
        masks.append((torch.arange(len(prompt)) >= WIDTH - own).long())
        rows.append((prompt, done))
    completion_width = max(completion_lengths)
    batch = []
    for (prompt, done), prompt_mask in zip(rows, masks):
        completion = torch.randint(3, 300, (completion_width,))
        ids = torch.cat([prompt, completion])
        mask = torch.cat([prompt_mask, (torch.arange(completion_width) < done).long()])
        labels = ids.masked_fill(mask == 0, -100)
        labels[:len(prompt)] = -100
        batch.append((ids, mask, labels))
    return torch.stack(prompts), torch.stack(masks), batch


def _micro_batches(batch, size):
    return [tuple(torch.stack(parts) for parts in zip(*batch[s:s + size])) for s in range(0, len(batch), size)]


@pytest.mark.parametrize(("size", "generations"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_micro_batches_and_a_flush_give_trls_log_probs_and_summed_gradients(size, generations):
    theirs, ours, shared = _pair()
    lengths = [5, 12, 1, 9] if generations == 1 else [5, 5, 9, 9]
    prompt_ids, prompt_mask, batch = _rollouts(lengths, [14, 6, 10, 1], generations)
    if generations == 2:
        batch = [batch[i] for i in (0, 2, 1, 3)]  # TRL shuffles the rollouts before splitting micro-batches
    shared.set_rollouts(prompt_ids, prompt_mask)
    # one prompt per rollout: the system turn; GRPO groups: each group's prompt but its last token
    expected = [SHARED] if generations == 1 else [SHARED + 9 - 1, SHARED + 5 - 1]
    assert [len(p.tokens) for p in shared.prefixes] == expected
    outs = {"theirs": [], "ours": []}
    for name, model in (("theirs", theirs), ("ours", ours)):
        for ids, mask, labels in _micro_batches(batch, size):
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
            (out.loss / len(batch)).backward()
            outs[name].append(out)
            if name == "ours":
                assert any(p.leaves for p in shared.prefixes)  # the micro-batch ran over a prefix's cache
    shared.flush()
    assert not any(p.leaves for p in shared.prefixes) and all(p.grad is not None for p in ours.parameters())
    for a, b in zip(outs["theirs"], outs["ours"]):
        assert torch.equal(a.label_mask, b.label_mask)
        assert torch.allclose(a.log_probs, b.log_probs, atol=1e-5)
        assert torch.allclose(a.entropy, b.entropy, atol=1e-5)
    for (name, mine), (_, trls) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.allclose(mine.grad, trls.grad, atol=1e-6, rtol=1e-4), name


def test_without_the_flush_the_shared_tokens_gradient_is_missing():
    theirs, ours, shared = _pair()
    prompt_ids, prompt_mask, batch = _rollouts([4, 7], [5, 8])
    shared.set_rollouts(prompt_ids, prompt_mask)
    for model in (theirs, ours):
        for ids, mask, labels in _micro_batches(batch, 1):
            model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).loss.backward()
    grad = ours.model.embed_tokens.weight.grad
    head = shared.prefixes[0].tokens.unique()
    assert not torch.allclose(grad[head], theirs.model.embed_tokens.weight.grad[head])  # flush is what adds it
    shared.flush()
    assert torch.allclose(grad[head], theirs.model.embed_tokens.weight.grad[head], atol=1e-6, rtol=1e-4)


def test_calls_it_cannot_serve_take_the_full_forward():
    _, ours, shared = _pair()
    prompt_ids, prompt_mask, batch = _rollouts([4, 7], [5, 8])
    ids, mask, labels = _micro_batches(batch, 2)[0]
    assert shared.hidden_states(ids, mask) is None  # no rollout batch yet
    shared.set_rollouts(prompt_ids, prompt_mask)
    assert shared.hidden_states(ids, mask, token_type_ids=torch.zeros_like(ids)) is None
    with torch.no_grad():  # TRL's old log-probs: the same path, over a cache without a graph
        frozen, _ = shared.hidden_states(ids, mask)
    assert not frozen.requires_grad and all(not p.leaves and p.frozen for p in shared.prefixes)
    with_graph, _ = shared.hidden_states(ids, mask)
    assert torch.equal(frozen, with_graph.detach())  # bit for bit: a clip is then never engaged by rounding
    shared.flush()
    assert all(not p.frozen for p in shared.prefixes)  # the weights change after a flush: no cache outlives it
    other = ids.clone()
    other[1, ~mask[1].bool()] = 0
    other[1, mask[1].bool().nonzero()[0]] += 1  # a row that does not begin with the shared tokens
    assert shared.hidden_states(other, mask) is None
    holed = mask.clone()
    holed[0, WIDTH + 2] = 0  # its text is not one run of the mask
    assert shared.hidden_states(ids, holed) is None
    ours.model.gradient_checkpointing = True  # recomputing a layer would write the cache twice
    assert shared.hidden_states(ids, mask) is None
    ours.model.gradient_checkpointing = False
    hidden, computed = shared.hidden_states(ids, mask)
    assert hidden.shape == (*ids.shape, 32) and computed.sum() == mask.sum() - 2 * SHARED


def test_a_short_shared_part_is_not_shared():
    _, _, shared = _pair()
    prompt_ids, prompt_mask, _ = _rollouts([4, 7], [5, 8])
    prompt_ids[1, WIDTH - 7 + 10] += 1  # the rows part after 10 shared tokens: below MIN_SHARED_TOKENS
    shared.set_rollouts(prompt_ids, prompt_mask)
    assert shared.prefixes == []

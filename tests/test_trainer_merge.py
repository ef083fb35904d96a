"""Merges on small safetensors checkpoints: soups, chat vectors, sharded output, LoRA folding.

Run: pytest tests/test_trainer_merge.py
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

from tansaku.trainer.merge import MergeError, chat_vector, run_merge, soup, weight_files  # noqa: E402


def make_checkpoint(path, tensors, dtype=torch.float32):
    path.mkdir(parents=True)
    save_file({k: v.to(dtype) for k, v in tensors.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "toy", "from": path.name}), encoding="utf-8")
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": path.name}), encoding="utf-8")
    return path


def read_all(path):
    out = {}
    for name, f in weight_files(path).items():
        out[name] = load_file(str(f))[name]
    return out


@pytest.fixture
def toy():
    g = torch.Generator().manual_seed(0)
    return {"embed.weight": torch.randn(8, 4, generator=g), "layer.0.w": torch.randn(4, 4, generator=g),
            "layer.0.b": torch.randn(4, generator=g)}


@pytest.mark.parametrize("copies", [2, 4])
def test_soup_of_identical_models_is_that_model_bit_for_bit(tmp_path, toy, copies):
    models = [make_checkpoint(tmp_path / f"m{i}", toy) for i in range(copies)]
    out = read_all(soup(models, tmp_path / "out"))
    assert out.keys() == toy.keys()
    for name, tensor in toy.items():
        assert torch.equal(out[name], tensor), name


def test_weighted_soup_matches_hand_computation_and_keeps_bf16(tmp_path, toy):
    other = {k: v * 3 + 1 for k, v in toy.items()}
    a = make_checkpoint(tmp_path / "a", toy, torch.bfloat16)
    b = make_checkpoint(tmp_path / "b", other, torch.bfloat16)
    out_dir = run_merge("soup", [str(a), str(b)], str(tmp_path / "out"), weights=[3, 1])
    out = read_all(out_dir)
    for name in toy:
        ta, tb = toy[name].bfloat16().float(), other[name].bfloat16().float()
        assert out[name].dtype == torch.bfloat16
        assert torch.equal(out[name], (0.75 * ta + 0.25 * tb).bfloat16())
    assert json.loads((out_dir / "config.json").read_text())["from"] == "a"  # side files from the first model


def test_chat_vector_arithmetic_is_exact(tmp_path):
    target = make_checkpoint(tmp_path / "target", {"w": torch.full((3, 2), 1.0), "v": torch.tensor([10.0, 20.0])})
    instruct = make_checkpoint(tmp_path / "instruct", {"w": torch.full((3, 2), 5.0), "v": torch.tensor([1.0, 2.0])})
    base = make_checkpoint(tmp_path / "base", {"w": torch.full((3, 2), 2.0), "v": torch.tensor([4.0, 8.0])})
    out_dir = run_merge("chat-vector", [str(target), str(instruct), str(base)], str(tmp_path / "out"))
    out = read_all(out_dir)
    assert torch.equal(out["w"], torch.full((3, 2), 4.0))  # 1 + (5 - 2)
    assert torch.equal(out["v"], torch.tensor([7.0, 14.0]))  # 10 + (1 - 4), 20 + (2 - 8)
    half = read_all(chat_vector(target, instruct, base, tmp_path / "half", scale=0.5))
    assert torch.equal(half["w"], torch.full((3, 2), 2.5))
    assert json.loads((out_dir / "tokenizer_config.json").read_text())["chat_template"] == "instruct"


def test_chat_vector_exclude_keeps_target_tensor_even_with_grown_vocabulary(tmp_path):
    target = make_checkpoint(tmp_path / "t", {"embed_tokens.weight": torch.ones(6, 2), "w": torch.ones(2)})
    instruct = make_checkpoint(tmp_path / "i", {"embed_tokens.weight": torch.zeros(4, 2), "w": torch.full((2,), 3.0)})
    base = make_checkpoint(tmp_path / "b", {"embed_tokens.weight": torch.zeros(4, 2), "w": torch.full((2,), 2.0)})
    with pytest.raises(MergeError, match="embed_tokens.weight.*shapes differ"):
        chat_vector(target, instruct, base, tmp_path / "fails")
    out = read_all(chat_vector(target, instruct, base, tmp_path / "out", exclude=["embed_tokens"]))
    assert torch.equal(out["embed_tokens.weight"], torch.ones(6, 2))
    assert torch.equal(out["w"], torch.full((2,), 2.0))


def test_small_shard_limit_writes_an_index_that_loads_back(tmp_path, toy):
    models = [make_checkpoint(tmp_path / f"m{i}", toy) for i in range(2)]
    out_dir = soup(models, tmp_path / "out", max_shard_bytes=64)
    index = json.loads((out_dir / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3  # each tensor (≥ 16 floats) got its own shard
    out = read_all(out_dir)
    assert all(torch.equal(out[k], v) for k, v in toy.items())
    assert not list(out_dir.glob("*.tmp"))


def test_mismatched_checkpoints_fail_with_the_tensor_name(tmp_path, toy):
    a = make_checkpoint(tmp_path / "a", toy)
    b = make_checkpoint(tmp_path / "b", {**toy, "layer.0.w": torch.zeros(2, 2)})
    c = make_checkpoint(tmp_path / "c", {k: v for k, v in toy.items() if k != "layer.0.b"})
    with pytest.raises(MergeError, match="layer.0.w"):
        soup([a, b], tmp_path / "o1")
    with pytest.raises(MergeError, match="layer.0.b"):
        soup([a, c], tmp_path / "o2")
    with pytest.raises(MergeError, match="no \\*.safetensors"):
        soup([a, tmp_path / "missing"], tmp_path / "o3")
    with pytest.raises(MergeError, match="3 models"):
        run_merge("chat_vector", [str(a), str(b)], str(tmp_path / "o4"))
    with pytest.raises(MergeError, match="method"):
        run_merge("ties", [str(a)], str(tmp_path / "o5"))


def test_lora_merge_gives_the_adapted_model_outputs(tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    base = LlamaForCausalLM(config)
    base.save_pretrained(tmp_path / "base")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    adapted = peft.get_peft_model(base, lora)
    adapted.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 5, 9, 2]])
    with torch.no_grad():
        expected = adapted(ids).logits
    out_dir = run_merge("lora", [str(tmp_path / "adapter")], str(tmp_path / "merged"), base=str(tmp_path / "base"))
    merged = LlamaForCausalLM.from_pretrained(out_dir)
    with torch.no_grad():
        got = merged(ids).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, LlamaForCausalLM.from_pretrained(tmp_path / "base")(ids).logits, atol=1e-3)

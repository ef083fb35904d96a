"""vLLM engine options for ``vllm:MODEL`` (``--llm-option KEY=VALUE``, ``from_spec`` keywords, ``judge.engine`` in an
RL recipe): parsed as YAML values, checked by name against vLLM's ``EngineArgs`` (without vLLM: the common names,
then refused because vLLM is missing), handed to ``vllm.LLM`` and recorded in the manifest's ``llm``.

No GPU and no vLLM needed: ``tests/fixtures/fake_vllm.py`` stands in for the ``vllm`` package.

    pytest tests/test_vllm_engine_options.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fixtures.fake_vllm import VERSION, hide_vllm, install_fake_vllm
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.errors import InputError
from tansaku.core.llm import ChatRequest, from_spec
from tansaku.core.llm.cli_options import llm_options
from tansaku.core.llm.vllm_engine import check_engine_options, parse_engine_options

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENVS = Path(__file__).resolve().parent / "fixtures" / "envs"


def stand_in_answer(messages: list[dict]) -> str:
    """What the synthesis stand-in LLM answers (e-Gov questions, judge verdicts …) to one conversation."""
    from tansaku.examples.stand_in_llm import respond

    return respond(ChatRequest(messages=messages))


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    monkeypatch.setenv("TANSAKU_CACHE", str(tmp_path / "cache"))  # never the user's answer cache
    return install_fake_vllm(monkeypatch, respond=stand_in_answer)


def test_cli_option_values_are_yaml_scalars():
    assert parse_engine_options(["tensor_parallel_size=8", "gpu_memory_utilization=0.9", "enable_prefix_caching=true",
                                 "dtype=bfloat16", "max-model-len=16384"]) == {
        "dtype": "bfloat16", "enable_prefix_caching": True, "gpu_memory_utilization": 0.9, "max_model_len": 16384,
        "tensor_parallel_size": 8}
    assert llm_options(engine=["enforce_eager=false"]).engine == {"enforce_eager": False}
    assert llm_options(engine={"dtype": "half"}).engine == {"dtype": "half"} and llm_options().engine == {}
    for bad, words in [("nokey", "KEY=VALUE"), ("=3", "KEY=VALUE"), ("dtype=[x", "not valid YAML")]:
        with pytest.raises(InputError, match=words):
            parse_engine_options([bad])


def test_engine_options_reach_the_vllm_engine(fake_vllm):
    client = from_spec("vllm:org/m", cache=False,
                       llm_options=llm_options(engine=["tensor_parallel_size=8", "max_model_len=16384"]))
    assert client.engine_kwargs == {"max_model_len": 16384, "tensor_parallel_size": 8}
    assert isinstance(client.engine_kwargs["tensor_parallel_size"], int)
    result = client.chat([ChatRequest(messages=[{"role": "user", "content": "質問の品質を審査してください"}])])[0]
    assert result.ok and result.finish_reason == "stop" and '"natural": 4' in result.content
    assert fake_vllm.LLM.made == [{"model": "org/m", "tensor_parallel_size": 8, "max_model_len": 16384}]
    # an engine argument given to from_spec itself wins over the command's
    explicit = from_spec("vllm:org/m", cache=False, llm_options=llm_options(engine=["max_model_len=16384"]),
                         max_model_len=4096)
    assert explicit.engine_kwargs == {"max_model_len": 4096}


def test_equal_options_give_an_equal_identity(fake_vllm):
    a = from_spec("vllm:org/m", cache=False, dtype="bfloat16", tensor_parallel_size=2)
    b = from_spec("vllm:org/m", cache=False, llm_options=llm_options(engine=["tensor_parallel_size=2",
                                                                          "dtype=bfloat16"]))
    assert a.cache_identity() == b.cache_identity() and a._cache_model() == b._cache_model()
    assert a.cache_identity()["engine"] == {"dtype": "bfloat16", "tensor_parallel_size": 2}
    assert list(a.describe()["params"]["engine"]) == ["dtype", "tensor_parallel_size"]  # what the manifest records


def test_an_unknown_option_is_refused_with_the_close_names(fake_vllm):
    with pytest.raises(InputError, match="max_model_length") as refused:
        from_spec("vllm:org/m", cache=False, llm_options=llm_options(engine=["max_model_length=4"]))
    message = str(refused.value)
    assert "did you mean max_model_len" in message and f"vLLM {VERSION}'s EngineArgs" in message
    assert "\n" not in message and not fake_vllm.LLM.made
    with pytest.raises(InputError, match="the spec names the model"):
        check_engine_options({"model": "other"})


def test_without_vllm_names_are_checked_and_then_vllm_is_missing(monkeypatch):
    hide_vllm(monkeypatch)
    with pytest.raises(InputError, match="'max_model_length'.*did you mean max_model_len.*vLLM is not installed"):
        from_spec("vllm:org/m", cache=False, max_model_length=4)
    with pytest.raises(InputError, match="needs vLLM, which is not installed here") as missing:
        from_spec("vllm:org/m", cache=False, llm_options=llm_options(engine=["tensor_parallel_size=2"]))
    assert "pip install vllm" in str(missing.value) and "tensor_parallel_size=2" in str(missing.value)
    assert check_engine_options({"tensor_parallel_size": 2, "dtype": "bfloat16"}) == {
        "dtype": "bfloat16", "tensor_parallel_size": 2}  # the common names pass the check by name


def test_synth_build_records_the_engine_options_in_the_manifest(fake_vllm, tmp_path):
    out = tmp_path / "egov"
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(EXAMPLES / "laws"), "--out", str(out),
                                            "--llm", "vllm:org/m", "--llm-option", "tensor_parallel_size=2",
                                            "--llm-option", "max_model_len=8192", "--limit", "3", "--quiet",
                                            "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert manifest["llm"]["backend"] == "vllm" and manifest["llm"]["model"] == "org/m"
    assert manifest["llm"]["params"]["engine"] == {"max_model_len": 8192, "tensor_parallel_size": 2}
    assert manifest["splits"]["train"] > 0 and manifest["config"]["llm"] == "vllm:org/m"
    assert fake_vllm.LLM.made == [{"model": "org/m", "max_model_len": 8192, "tensor_parallel_size": 2}]


@pytest.mark.parametrize("option, words", [
    ("nokey", "KEY=VALUE"),
    ("bogus_key=1", "unknown vLLM engine option 'bogus_key'"),
    ("max_model_length=4", "did you mean max_model_len"),
])
def test_the_cli_refuses_a_bad_option_before_any_work(option, words, fake_vllm, tmp_path):
    out = tmp_path / "o"
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(EXAMPLES / "laws"), "--out", str(out),
                                            "--llm", "vllm:org/m", "--llm-option", option])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()  # one line naming the option, as every option type refuses
    assert len(lines) == 1 and lines[0].startswith("error: --llm-option: ") and words in lines[0], lines
    assert not out.exists() and not fake_vllm.LLM.made


def test_a_vllm_spec_without_vllm_is_refused_before_any_work(monkeypatch, tmp_path):
    hide_vllm(monkeypatch)
    out = tmp_path / "o"
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(EXAMPLES / "laws"), "--out", str(out),
                                            "--llm", "vllm:org/m", "--llm-option", "tensor_parallel_size=2"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("error: ") and "needs vLLM, which is not installed" in result.output
    assert not out.exists()  # egov's generator comes after its articles and index: refused before those


def write_rl_recipe(path: Path, index, judge) -> Path:
    recipe = {"model_name_or_path": "tiny", "output_dir": str(path.parent / "run"), "use_cpu": True,
              "tasks": [{"name": "deepresearch", "data": str(ENVS / "deepresearch.jsonl"), "index": str(index)}],
              "num_generations": 2, "max_steps": 1, "report_to": "none", "judge": judge}
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return path


def test_rl_recipe_judge_engine_reaches_the_judge_client(monkeypatch, tmp_path, envs_index):
    import trl  # noqa: F401 - imported before the stand-in: TRL asks importlib whether vLLM is installed

    from tansaku.trainer.recipes import RecipeError, load_recipe
    from tansaku.trainer.rl import judge_client

    install_fake_vllm(monkeypatch)

    config = write_rl_recipe(tmp_path / "r.yaml", envs_index, {"model": "vllm:org/m", "engine": {"max_model_len": 4096}})
    recipe = load_recipe(config, kind="rl")
    assert recipe.script_args.judge.client_options() == {"cache": False, "max_model_len": 4096}
    judge = judge_client(recipe, llm_options=llm_options(engine=["max_model_len=1", "tensor_parallel_size=2"]))
    assert judge.engine_kwargs == {"max_model_len": 4096, "tensor_parallel_size": 2}  # the recipe's own wins
    for bad, words in [({"model": "vllm:org/m", "engine": {"max_model_length": 1}}, "judge.engine: unknown"),
                       ({"model": "scripted:j.jsonl", "engine": {"max_model_len": 1}}, "vllm: judges only")]:
        with pytest.raises(RecipeError, match=words):
            load_recipe(write_rl_recipe(tmp_path / "bad.yaml", envs_index, bad), kind="rl")

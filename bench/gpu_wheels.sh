#!/usr/bin/env bash
# Fetch, where PyPI is reachable, what bench/gpu_smoke.py installs on a bare GPU machine (torch, transformers,
# peft and accelerate present; no trl/datasets; no network; ≤ 64 MiB of extra files): wheels into
# bench/wheels/ (gitignored) and the tiny model's tokenizer into bench/wheels/tokenizer/.
#
#   bash bench/gpu_wheels.sh                          # for a Linux x86_64 machine with this Python version
#   TARGET_PY=312 PLATFORM=manylinux_2_28_aarch64 bash bench/gpu_wheels.sh   # another Python / CPU
#
# Pins are the versions this checkout runs with (.venv), so the GPU run uses the TRL the tests use.
# --no-deps: exactly these; gpu_smoke.py installs the ones the target lacks. The big ones are pyarrow (~42 MiB) and pandas (~12 MiB):
# datasets and trl import both, so they cannot be left out; the rest is < 6 MiB. matplotlib (~20 MiB with its
# dependencies), polars (~35 MiB) and sudachidict-core (~70 MiB) are left out: the smoke run never imports them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TARGET_PY=${TARGET_PY:-$($PY -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')}
PLATFORM=${PLATFORM:-x86_64}
OUT=bench/wheels
# rich without markdown-it-py / pygments: installed --no-deps, its console and progress bars never import them.
PKGS=(trl datasets pyarrow pandas python-dateutil tzdata dill multiprocess xxhash tantivy json-repair rich)
specs=()
for p in "${PKGS[@]}"; do
  v=$($PY -m pip show "$p" 2>/dev/null | awk '/^Version:/{print $2}')
  specs+=("$p${v:+==$v}")
done
if [[ $PLATFORM == x86_64 || $PLATFORM == aarch64 ]]; then
  platforms=(--platform "manylinux2014_$PLATFORM" --platform "manylinux_2_17_$PLATFORM" --platform "manylinux_2_28_$PLATFORM")
else
  platforms=(--platform "$PLATFORM")
fi
mkdir -p "$OUT"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version "$TARGET_PY" "${platforms[@]}" -d "$OUT" "${specs[@]}"
# Slim pyarrow (52 → ~34 MiB): drop Arrow Flight, S3 and the C++ headers/tests. Nothing the smoke run imports
# loads them (pyarrow.fs imports _s3fs only if present; flight only through pyarrow.flight).
$PY - <<'PYEOF'
import base64, hashlib, re, zipfile
from pathlib import Path

DROP = re.compile(r"pyarrow/(libarrow_flight|libarrow_python_flight|_flight|libarrow_s3|_s3fs|include/|tests/|src/)")
for wheel in Path("bench/wheels").glob("pyarrow-*.whl"):
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        record_name, record = None, []
        for info in src.infolist():
            if DROP.match(info.filename):
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                record_name = info.filename
                continue
            data = src.read(info)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{info.filename},sha256={digest},{len(data)}")
        dst.writestr(record_name, "\n".join(record + [f"{record_name},,"]) + "\n")
    slim.replace(wheel)
PYEOF
$PY - <<'PYEOF'
import shutil
from pathlib import Path

from tansaku.core.tiny_model import tiny_model_dir

src, dst = tiny_model_dir(), Path("bench/wheels/tokenizer")
dst.mkdir(parents=True, exist_ok=True)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
    if (src / name).is_file():
        shutil.copy2(src / name, dst / name)
PYEOF
ls -la "$OUT" | awk 'NR>1{printf "%8.1f MiB  %s\n", $5/1048576, $9}'
du -sh "$OUT"

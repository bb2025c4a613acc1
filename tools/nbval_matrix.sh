#!/usr/bin/env bash
# Run nbval on notebooks under each numerical setting CI can vary, against the same stored outputs:
#   tools/nbval_matrix.sh [notebooks/NN_name.ipynb ...]     (default: every notebook)
# Settings: native; ATEN_CPU_CAPABILITY=default (no SIMD kernels); OMP_NUM_THREADS=1; MKL_CBWR=COMPATIBLE.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(notebooks)
if [ -z "${GPT_LESSON_DATA:-}" ] && [ -f ../shared/data/tinyshakespeare.txt ]; then
  export GPT_LESSON_DATA="$PWD/../shared/data/tinyshakespeare.txt"
fi
if [ -z "${GPT_LESSON_GPT2:-}" ] && [ -f ../shared/data/gpt2/vocab.bpe ]; then
  export GPT_LESSON_GPT2="$PWD/../shared/data/gpt2"
fi
status=0
for setting in native ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_CBWR=COMPATIBLE; do
  echo "== nbval with $setting"
  if [ "$setting" = native ]; then
    "$PY" -m pytest -q "${targets[@]}" || status=1
  else
    env "$setting" "$PY" -m pytest -q "${targets[@]}" || status=1
  fi
done
exit $status

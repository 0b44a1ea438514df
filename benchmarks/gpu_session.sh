#!/usr/bin/env bash
# The GPU checks of issue 36 in one command on a machine with a CUDA GPU, about 9 minutes on an
# H200 with 16 cores: `pytest -m gpu` (first: a failure there says why what follows fails), then
# `benchmarks.overhead --device cuda` (the pairs only; OVERHEAD_S=0 skips it), then
# `benchmarks.gpu` (3 seeds, LIMIT_S per run). Their JSON (the partial file after every run, the profile and the plan too)
# and the log go to $OUT when it is set.
#
# Where the machine lacks optuna, simpy or mnist1d, put their wheels (and optuna's alembic,
# colorlog, Mako and SQLAlchemy) in .whl/ first: they are installed from there, nothing is fetched.
set -o pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1
LOG=${OUT:-/tmp}/gpu-session.log
echo "cores $(nproc); $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null); $(date -u +%T)" | tee "$LOG"
quiet() { grep -v "torchelastic-events\|^frame #\|^INFO"; }
keep() { [ -n "${OUT:-}" ] && cp "$@" "$OUT"/ 2>/dev/null; true; }
timeout "${PYTEST_S:-80}" python3 -m pytest -q -m gpu tests 2>&1 | quiet | tee -a "$LOG" | tail -8
if [ "${OVERHEAD_S:-160}" -gt 0 ]; then
    timeout "${OVERHEAD_S:-160}" python3 -m benchmarks.overhead --device cuda --no-variants --pairs 3 --seconds 2 \
        --only teacher-mlp --only cnn1d-mnist1d --only shapes-resnet 2>&1 | quiet | tee -a "$LOG" | tail -12
    keep benchmarks/results/overhead-cuda.json
fi
timeout "${GPU_S:-320}" python3 -m benchmarks.gpu --no-pytest --limit-s "${LIMIT_S:-20}" ${GPU_ARGS:-} 2>&1 | quiet \
    | tee -a "$LOG" | tail -40
keep benchmarks/results/gpu.json benchmarks/results/gpu-partial.json benchmarks/results/gpu-profile.json \
    benchmarks/results/gpu-plan.json
echo "== end $(date -u +%T)" | tee -a "$LOG"

#!/usr/bin/env bash
# The GPU checks of issue 36 in one command on a machine with a CUDA GPU, about 8 minutes on an
# H200 with 16 cores: `benchmarks.gpu` (3 seeds, 30 s per run), then `pytest -m gpu`, then, with
# OVERHEAD_S set, `benchmarks.overhead --device cuda`. Their JSON (the partial file after every
# run, the profile and the plan too) and the log go to $OUT when it is set.
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
timeout "${GPU_S:-430}" python3 -m benchmarks.gpu --no-pytest --limit-s "${LIMIT_S:-30}" ${GPU_ARGS:-} 2>&1 | quiet | tee -a "$LOG" | tail -60
[ -n "${OUT:-}" ] && cp benchmarks/results/gpu*.json "$OUT"/ 2>/dev/null
timeout "${PYTEST_S:-90}" python3 -m pytest -q -m gpu tests 2>&1 | quiet | tee -a "$LOG" | tail -8
if [ "${OVERHEAD_S:-0}" -gt 0 ]; then
    timeout "$OVERHEAD_S" python3 -m benchmarks.overhead --device cuda --pairs 3 --seconds 3 --rounds 2 \
        --window-s 0.5 --only teacher-mlp 2>&1 | quiet | tee -a "$LOG" | tail -30
    [ -n "${OUT:-}" ] && cp benchmarks/results/overhead-cuda*.json "$OUT"/ 2>/dev/null
fi
echo "== end $(date -u +%T)" | tee -a "$LOG"

#!/usr/bin/env bash
# The GPU checks of issue 36 in one command on a machine with a CUDA GPU, about 9 minutes on an
# H200 with 16 cores: `pytest -m gpu`, `benchmarks.gpu` (3 seeds) and `benchmarks.overhead
# --device cuda`; their JSON goes to $OUT (or benchmarks/results/ alone when OUT is unset).
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
echo "cores $(nproc); $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null); $(date -u +%T)"
quiet() { grep -v "torchelastic-events\|^frame #\|^INFO"; }
timeout "${GPU_S:-420}" python3 -m benchmarks.gpu ${GPU_ARGS:-} 2>&1 | quiet | tail -80
timeout "${OVERHEAD_S:-100}" python3 -m benchmarks.overhead --device cuda --pairs 3 --seconds 3 --rounds 2 \
    --window-s 0.5 --only teacher-mlp 2>&1 | quiet | tail -30
if [ -n "${OUT:-}" ]; then
    cp benchmarks/results/gpu*.json benchmarks/results/overhead-cuda*.json "$OUT"/ 2>/dev/null
fi
echo "== end $(date -u +%T)"

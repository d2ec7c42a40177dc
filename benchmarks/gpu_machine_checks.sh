#!/usr/bin/env bash
# The checks that need a CUDA GPU or many cores, in one go. CI has neither, so these run by hand
# on a machine that has numba-cuda, PyTorch, pytest and pytest-xdist installed for `python3`
# (or for $PYTHON):
#
#   tests    the CUDA tests on the real device (MINIDL_TEST_CUDA=gpu: never the simulator)
#   cuda     benchmarks/bench_cuda.py, minidl's CUDA backend against PyTorch on the same GPU
#   threads  benchmarks/bench_engine.py at 1, 2, 4, 8 and 16 threads ($THREADS), one workload
#            at a time, so that a run cut short still leaves the tables it finished
#
# Usage: bash benchmarks/gpu_machine_checks.sh LOG_DIR [STEP ...]     (default: every step)
# Each step writes LOG_DIR/STEP.log and has a time limit ($TESTS_S, $CUDA_S, $THREADS_S seconds).
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=${1:?give a folder for the logs}
shift
steps=${*:-tests cuda threads}
mkdir -p "$log_dir"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

echo "== machine: $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
"$PY" -c 'import numpy, numba, torch; from numba import cuda
print("numpy", numpy.__version__, "numba", numba.__version__, "torch", torch.__version__,
      "cuda device:", cuda.is_available() and cuda.get_current_device().name)' 2>&1 | tail -3

for step in $steps; do
    start=$(date +%s)
    case $step in
        tests)
            MINIDL_TEST_CUDA=gpu timeout "${TESTS_S:-240}" "$PY" -m pytest -p no:cacheprovider \
                -n "${TEST_WORKERS:-8}" --timeout 120 -q -rfE --durations=10 \
                tests/backend/cuda tests/checkpoint/test_checkpoint_map_location.py \
                tests/inference/test_inference_compile.py tests/test_api_contract.py \
                tests/distributed/test_distributed_local_device.py \
                ${TEST_ARGS:-} >"$log_dir/tests.log" 2>&1
            ;;
        cuda)
            timeout "${CUDA_S:-120}" "$PY" benchmarks/bench_cuda.py >"$log_dir/cuda.log" 2>&1
            ;;
        threads)
            : >"$log_dir/threads.log"
            deadline=$((start + ${THREADS_S:-300}))
            for workload in ${WORKLOADS:-lenet cifar attention lstm mlp transformer infer}; do
                left=$((deadline - $(date +%s)))
                [ "$left" -gt 5 ] || break
                timeout "$left" "$PY" benchmarks/bench_engine.py --workloads "$workload" \
                    --threads "${THREADS:-1,2,4,8,16}" --rounds "${ROUNDS:-1}" \
                    --seconds "${SECONDS_PER_RUN:-1}" >>"$log_dir/threads.log" 2>&1
            done
            ;;
        *) echo "unknown step: $step" >&2; exit 2 ;;
    esac
    echo "== $step: exit $? after $(( $(date +%s) - start )) s"
    tail -n "${TAIL:-25}" "$log_dir/$step.log"
done

#!/usr/bin/env bash
# The GPU checks of the issues, on a machine with one CUDA GPU (e.g. the lent H100), from the project root:
#
#   scripts/gpu_checks.sh OUT [tier] [matrix-gpt2] [matrix-llama] [overhead] [compile-gpt2] [compile-llama] [profile]
#                             [gpu-constants] [calibrate] [heldout-llama] [recompute] [timer-sync]
#                                                        (default: the first four; compile-*: issue 15's eager vs
#                                                         compiled bf16 compare, --compile both; profile: where
#                                                         the matrix cells' step time goes, by kernel kind, with
#                                                         scripts/profile_gpu_step.py, for the GPU time model;
#                                                         gpu-constants: the GPU model's timings alone
#                                                         (worker/calibrate_gpu.py); calibrate: `dsbench calibrate
#                                                         --check` on GPT-2, profile version 2 with the host's
#                                                         zero_host_us; heldout-llama: the 1.1B Llama's ZeRO cells,
#                                                         which that profile did not see; recompute: issue 28's
#                                                         --recompute on the 1.1B Llama's peak and step, and each
#                                                         policy's losses on NCCL; timer-sync: DeepSpeed's
#                                                         throughput timer with and without its device waits)
#
# tier: every strategy through its launcher at world size 1 on NCCL, their losses, the compiled strategies and
# fp16's loss scale (tests/gpu; the run folders stay in OUT/tier-runs); matrix-*: the bf16
# compare of single/ZeRO-1/2/3/offload (GPT-2 124M at seq 1024 x 16, a 1.1B Llama at seq 2048 x 4);
# overhead: scripts/bench_harness_overhead.py on GPT-2 124M bf16. Logs and result folders (tar.gz) go
# into OUT. Needs deepspeed importable (see ../shared/GPU.md for installing it from wheels).
set -u
out=${1:?usage: scripts/gpu_checks.sh OUT [tier] [matrix-gpt2] [matrix-llama] [overhead]}
shift
steps=${*:-tier matrix-gpt2 matrix-llama overhead}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# DeepSpeed's JIT ops for this GPU only, as a plain version: DeepSpeed 0.19.8 cannot parse "9.0a", which some
# CUDA images export (dsbench refuses it with a one-line error).
TORCH_CUDA_ARCH_LIST=$(python3 -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
export TORCH_CUDA_ARCH_LIST
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
# `pip install --target T` (../shared/GPU.md's recipe) puts the `deepspeed` launcher in T/bin, off PATH: the
# DeepSpeed cells would stop at "launcher 'deepspeed' not found" (2026-11-28's first recompute call)
if ! command -v deepspeed > /dev/null; then
  scripts_dir=$(python3 -c "import deepspeed, os; print(os.path.dirname(os.path.dirname(deepspeed.__file__)))")/bin
  [ -x "$scripts_dir/deepspeed" ] && export PATH=$scripts_dir:$PATH
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/gpu.csv" 2>&1
python3 -c "import torch, transformers, deepspeed, accelerate; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__, \
'accelerate', accelerate.__version__)" >> "$out/gpu.csv" 2>&1
# Every WATCH_S seconds while process $1 runs: the processes on the machine and, where py-spy is installed (the
# GPU.md recipe's wheels can carry it), each dsbench rank's Python stack; into $2. A cell that stalls before its
# first step then says which process waits where (a rank stopped by `timeout` says its own place too: worker/stop.py).
watch_processes() {
  while sleep "${WATCH_S:-30}"; kill -0 "$1" 2> /dev/null; do
    { echo "=== $(date +%T)"; ps -eo pid,ppid,etimes,pcpu,rss,args --sort=pid | grep -v " ps -eo" | cut -c1-200
      nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
      if command -v py-spy > /dev/null; then
        for pid in $(pgrep -f dsbench.train); do timeout 20 py-spy dump --pid "$pid" | head -40; done
      fi; } >> "$2" 2>&1
  done
}
status=0
for step in $steps; do
  start=$(date +%s)
  case $step in
    tier)
      python3 -m pytest tests/gpu -m gpu -v -s -p no:cacheprovider --basetemp "$out/tier-runs" \
        -k "nccl or collectives or same_losses or compiled_strategies or fp16" > "$out/tier.log" 2>&1 || status=1 ;;
    matrix-gpt2|matrix-llama)
      model=$([ "$step" = matrix-gpt2 ] && echo gpt2 || echo llama-1b)
      DSBENCH_GPU_OUT=$out/runs python3 -m pytest tests/gpu -m gpu -v -s -p no:cacheprovider \
        -k "test_bf16_matrix_on_one_gpu and $model" > "$out/$step.log" 2>&1 || status=1
      tar czf "$out/$step.tgz" -C "$out/runs" "compare-$model" 2>/dev/null ;;
    recompute)  # issue 28: the Llama's peak and step under --recompute none/full/selective, then the policies' losses
      DSBENCH_GPU_OUT=$out/runs python3 -m pytest tests/gpu -m gpu -v -s -p no:cacheprovider -k recompute \
        > "$out/recompute.log" 2>&1 || status=1
      find "$out/runs/recompute-llama-1b" -name "*.log" -size +1M -delete 2>/dev/null
      tar czf "$out/recompute.tgz" -C "$out/runs" recompute-llama-1b 2>/dev/null ;;
    compile-gpt2|compile-llama)
      model=$([ "$step" = compile-gpt2 ] && echo gpt2 || echo llama-1b)
      DSBENCH_GPU_OUT=$out/runs python3 -m pytest tests/gpu -m gpu -v -s -p no:cacheprovider \
        -k "eager_and_compiled and $model" > "$out/$step.log" 2>&1 || status=1
      tar czf "$out/$step.tgz" -C "$out/runs" "compile-$model" 2>/dev/null ;;
    overhead)
      python3 scripts/bench_harness_overhead.py --model gpt2 --precision bf16 --micro-batch 16 --seq-len 1024 \
        --steps 25 --warmup 5 --repeats 2 > "$out/overhead.json" 2> "$out/overhead.err" || status=1 ;;
    profile)  # the stored matrix cells' shapes and DeepSpeed configs, one process per engine
      runs=tests/data/runs/gpu-h100
      for model in gpt2 llama-1b; do
        shape=$([ $model = gpt2 ] && echo "--micro-batch 16 --seq-len 1024" || echo "--micro-batch 4 --seq-len 2048")
        for engine in single zero1 zero2 zero3; do
          config=$(ls "$runs"/compare-$model/cells/$engine-w1-*/ds_config.json 2>/dev/null | head -1)
          # shellcheck disable=SC2086
          timeout 240 python3 scripts/profile_gpu_step.py --model $model $shape --engine $engine \
            ${config:+--ds-config "$config"} --out "$out/profile-$model-$engine.json" \
            >> "$out/profile.log" 2>&1 || status=1
        done
      done ;;
    gpu-constants)  # the raw timings alone, in case calibrate fails: plan/gpu_calibration.gpu_section reads them
      timeout 90 python3 -c "import json, sys; from dsbench.worker.calibrate_gpu import measure_gpu; \
json.dump(measure_gpu('cuda:0', 5), sys.stdout, indent=1)" > "$out/gpu-constants.json" 2> "$out/gpu-constants.err" \
        || status=1 ;;
    calibrate)  # issue 26: profile version 2, GPT-2 at GPU.md's shape, with --check's single and ZeRO-1/2/3 cells
      timeout 300 python3 -m dsbench calibrate --num-gpus 1 --model gpt2 --micro-batch 16 --seq-len 1024 \
        --precision bf16 --check -o "$out/profile-gpu.json" --run-dir "$out/calibrate" --timeout 150 \
        > "$out/calibrate.log" 2>&1 || status=1
      find "$out/calibrate" -name "*.log" -size +1M -delete
      tar czf "$out/calibrate.tgz" -C "$out" calibrate 2>/dev/null && rm -rf "$out/calibrate" ;;
    heldout-llama)  # out of sample for the profile above: `dsbench plan --profile` predicts these afterwards
      timeout 170 python3 -m dsbench compare --models llama-1b --world-sizes 1 --micro-batches 4 --seq-len 2048 \
        --precision bf16 --strategies zero1,zero2,zero3 --steps 20 --warmup 5 --timeout 100 \
        --out "$out/runs/heldout-llama-1b" > "$out/heldout-llama.log" 2>&1 || status=1
      tar czf "$out/heldout-llama.tgz" -C "$out/runs" heldout-llama-1b 2>/dev/null ;;
    timer-sync)  # DeepSpeed's throughput timer, rendered without its device waits since 2026-12-04 (DeepSpeed
      # PR #5363: synchronized=false), against the default that waits twice a micro-step: GPT-2 ZeRO-2 and ZeRO-3
      # at GPU.md's shape, A B A B so that a drift of the machine shows as a spread; wall-clock tokens/s. FusedAdam's
      # JIT build first, timed apart, so that no cell pays it (a cold build outlasted a 240 s cell, 2026-12-04)
      jit_start=$(date +%s)
      timeout 600 python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load()" \
        >> "$out/timer-sync.log" 2>&1 || status=1
      echo "FusedAdam JIT build: $(( $(date +%s) - jit_start )) s" >> "$out/timer-sync.txt"
      for stage in ${TIMER_SYNC_STAGES:-2 3}; do
        for round in 1 2; do
          for sync in false true; do
            run="$out/timer-sync-z$stage-$sync-$round"
            timeout "${TIMER_SYNC_TIMEOUT:-240}" python3 -m dsbench launch --zero $stage --num-gpus 1 --model gpt2 \
              --precision bf16 --micro-batch 16 --set timers.throughput.synchronized=$sync --run-dir "$run" \
              -- --steps 25 --warmup 5 --seq-len 1024 >> "$out/timer-sync.log" 2>&1 &
            cell=$!
            watch_processes $cell "$out/timer-sync-processes.log" &
            wait $cell || status=1
            python3 -c "import json, sys; t = json.load(open(sys.argv[1])).get('throughput') or {}; \
print(sys.argv[2], '%.0f tokens/s' % t.get('tokens_per_s', float('nan')))" "$run/summary.json" \
              "zero$stage synchronized=$sync round $round" >> "$out/timer-sync.txt" 2>&1
          done
        done
      done
      find "$out" -name "*.log" -size +1M -delete ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
  echo "$step: $(( $(date +%s) - start )) s (status so far $status)" | tee -a "$out/steps.txt"
done
rm -rf "$out/runs"
exit $status

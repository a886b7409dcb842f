#!/usr/bin/env bash
# The prepared check of rapidrl's CUDA paths on a GPU machine: install the carried wheels, run the CUDA tests and
# the device-path tests, then the GPU benchmark (CartPole on the GPU, eager and CUDA graph; PPO/DQN Atari and SAC
# HalfCheetah with the networks on the GPU against SB3) and the DQN profile (tools/gpu_profile_dqn.py). Every part
# has its own time limit and writes its log under $OUT, so one part failing still reports the rest. PARTS picks the
# parts (default: all), WORKLOADS the heavy workloads (default ppo,dqn,sac).
#
# The machine it was written for: a fresh Linux machine with one CUDA GPU, python3 3.12 with a CUDA build of torch
# already installed, this checkout copied onto it, and no network (so the other dependencies travel as wheels,
# downloaded beforehand on a machine that has one). Run it from the repository root; $OUT collects the logs.
#
# Here, once:  pip download --no-deps --python-version 3.12 --only-binary=:all: -d .gpu-wheels \
#                gymnasium farama-notifications tomli-w ale-py mujoco mujoco-core glfw pyopengl stable_baselines3
# There:       bash tools/gpu_check.sh        (carry .gpu-wheels)
set -u
OUT=${OUT:-/tmp/gpu_out}
PARTS=${PARTS:-tests,cartpole,graph,heavy,profile}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
has() { [[ ",$PARTS," == *",$1,"* ]]; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nproc
} > "$OUT/machine.txt" 2>&1
python3 -m pip install -q --no-deps --no-index .gpu-wheels/*.whl > "$OUT/install.txt" 2>&1 &&
  python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$OUT/install.txt" 2>&1 ||
  { echo "install failed"; tail -n 20 "$OUT/install.txt"; exit 1; }
if has tests; then
  timeout "${TESTS_S:-170}" python3 -m pytest -q -n 8 -p no:cacheprovider -rs ${TESTS:-tests/test_cuda.py \
    tests/test_device.py tests/test_precision.py} > "$OUT/tests.txt" 2>&1
  echo "tests exit $?" >> "$OUT/tests.txt"
fi
if has cartpole; then
  timeout "${CARTPOLE_S:-70}" python3 -m rapidrl.benchmarks.gpu --envs 4096,65536 --steps 4000000 \
    --out "$OUT/gpu_eager.json" > "$OUT/gpu_bench.txt" 2>&1
fi
if has graph; then
  timeout "${GRAPH_S:-50}" python3 -m rapidrl.benchmarks.gpu --envs 4096,65536 --steps 4000000 --cuda-graph \
    --out "$OUT/gpu_graph.json" >> "$OUT/gpu_bench.txt" 2>&1
fi
if has heavy; then
  timeout "${HEAVY_S:-230}" python3 -m rapidrl.benchmarks.gpu --envs "" --heavy --workloads "${WORKLOADS:-ppo,dqn,sac}" \
    --out "$OUT/gpu_heavy.json" > "$OUT/gpu_heavy.txt" 2>&1
  echo "heavy exit $?" >> "$OUT/gpu_heavy.txt"
fi
if has profile; then
  timeout "${PROFILE_S:-110}" python3 tools/gpu_profile_dqn.py > "$OUT/dqn_profile.txt" 2>&1
  echo "profile exit $?" >> "$OUT/dqn_profile.txt"
fi
grep -h -E "passed|failed|exit|SPS|==" "$OUT"/*.txt | tail -n 40

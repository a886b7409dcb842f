# The two commands of the README: `make train` (main job) and `make test`.
PY := .venv/bin/python

.PHONY: setup setup-dev setup-bench train test lint bench wheel

setup:
	scripts/setup.sh

setup-dev:
	scripts/setup.sh dev,ray,llm,export,tune,track,minatar,atari,mujoco,marl,offline,robotics

setup-bench:
	scripts/setup.sh dev,bench,minatar,atari,mujoco

train: setup
	$(PY) -m rapidrl train ppo CartPole-v1 --timesteps 100000 --seed 0

test: setup-dev
	$(PY) -m ruff check rapidrl tests tools
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25

bench: setup-bench
	$(PY) -m rapidrl bench all

# A wheel that carries the main job's kernels compiled for portable x86-64 levels (rapidrl/_kernel_cache): its first
# run after pip install compiles none of them (rapidrl.precompile, rapidrl.kernels.cache).
wheel: setup
	rm -rf rapidrl/_kernel_cache dist
	$(PY) -m rapidrl.precompile --portable rapidrl/_kernel_cache
	$(PY) -m pip wheel . --no-deps -w dist

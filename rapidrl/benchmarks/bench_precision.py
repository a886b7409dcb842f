"""Precision suite: one update step of rapidrl's heavy networks in float32, bfloat16, channels-last and under
``torch.compile``, through the algorithms' own update code (``rapidrl.train.precision``).

Each case times one gradient step of a real model on a fixed minibatch it collected itself (forward, loss,
backward, gradient clipping, the Adam step): PPO's ``_update`` on a rollout of exactly one minibatch (one epoch),
DQN's and SAC's ``_update_step`` on one sampled batch. Contenders are variants of the same model, interleaved in
one process at the harness's torch threads (1 by default):

- ``rapidrl``: the defaults (precision "fp32"; the Nature CNN with a channels-last input; the compiled (Numba)
  gradient backend where it applies: PPO and SAC on MLPs);
- ``rapidrl/torch``: the PyTorch autograd backend in float32 (where the default is the compiled one);
- ``rapidrl/bf16``: ``precision="bf16"`` (autocast; the torch backend);
- ``rapidrl/nchw`` and ``rapidrl/bf16-nchw``: the Nature CNN with a contiguous (NCHW) input;
- ``rapidrl/compile`` and ``rapidrl/bf16-compile``: the policy's forward (encoder and heads) under
  ``torch.compile`` (inductor), fp32 / bf16. Compilation happens in the warm-up; a contender whose compilation
  fails is listed as failed.

Cases: ``ppo/minatar/b512``, ``dqn/minatar/b64`` (the MinAtar presets' batches), ``ppo/mlp64/b64`` (CartPole,
64x64 tanh: the small networks "auto" keeps in float32), ``ppo/nature/b256`` (CleanRL's ppo_atari minibatch:
Breakout, Nature CNN, batch 256), ``dqn/nature/b32`` (CleanRL's dqn_atari batch), ``ppo/mlp256/b64`` (rl-zoo3's
PPO HalfCheetah minibatch: 256x256 ReLU, batch 64), ``ppo/mlp256/b256``, ``sac/mlp256/b256`` (HalfCheetah,
256x256 actor and twin critics, batch 256), ``sac/simba/b256`` (the SAC preset's MLP against the SimBa variant's
networks, fp32 and bf16: docs/simba.md). Results and what was adopted: docs/precision.md.

    rapidrl bench precision [--quick] [--filter nature] [--torch-threads 1]
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator

import torch

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 15}
ATARI, MUJOCO, MINATAR = "ALE/Breakout-v5", "HalfCheetah-v5", "MinAtar/Breakout-v1"


def _compile_policy(model) -> None:
    """The policy's forward (encoder and heads: where the arithmetic is) under torch.compile."""
    model.policy._heads = torch.compile(model.policy._heads)


def _ppo(env_id: str, batch: int, **kw) -> Callable[[], Callable[[], None]]:
    """A builder: a PPO model whose rollout is exactly one minibatch of ``batch`` (one epoch), collected once; the
    step it returns runs one ``_update`` on that rollout (one minibatch: forward, loss, backward, Adam)."""
    def build():
        import rapidrl as rr

        num_envs = 8 if env_id in (ATARI, MINATAR) else 1
        variant = dict(kw)
        compile_ = variant.pop("compile_policy", False)
        nchw = variant.pop("nchw", False)
        model = rr.PPO(env_id, num_envs=num_envs, num_steps=batch // num_envs, minibatch_size=batch, update_epochs=1,
                       seed=0, torch_threads=None, anneal_lr=False, **variant)
        if nchw:
            model.policy.trunk.channels_last = False  # the CNN encoder is the shared trunk
        if compile_:
            _compile_policy(model)
        model.learn(batch, progress_bar=False)  # one rollout and one update
        model.reporting = False  # no logging in the timed updates (a report reads scalars back every call)
        return model._update

    return build


def _offpolicy(cls_name: str, env_id: str, batch: int, **kw) -> Callable[[], Callable[[], None]]:
    """A builder: a DQN or SAC model with ``batch`` x 8 random transitions in replay; the step it returns runs one
    ``_update_step`` on one fixed sampled batch."""
    def build():
        import rapidrl as rr

        starts = max(8 * batch, 1000)
        model = getattr(rr, cls_name)(env_id, seed=0, torch_threads=None, batch_size=batch, learning_starts=starts,
                                      buffer_size=10_000, **kw)
        model.learn(starts, progress_bar=False)  # random steps into replay, no update yet
        sample = model.buffer.sample(batch, as_torch=True)
        return lambda: model._update_step(sample)

    return build


def _case(name: str, builders: dict[str, Callable], params: dict) -> Case:
    """A case whose contenders are built lazily (in their setup, right before their warm-up)."""
    steps: dict[str, Callable[[], None]] = {}

    def contender(key: str):
        return lambda: steps[key]()

    def setup(key: str, build: Callable):
        def run():
            steps[key] = build()
        return run

    return Case(name, {k: contender(k) for k in builders}, setup={k: setup(k, b) for k, b in builders.items()},
                params=params, items_per_call=1, item_unit="updates")


def cases(ctx: Context) -> Iterator[Case]:
    # the small networks "auto" keeps in float32: the MinAtar CNN (PPO's MinAtar preset minibatch) and 64x64 MLPs
    yield _case("ppo/minatar/b512", {
        "rapidrl": _ppo(MINATAR, 512, encoder="minatar"),
        "rapidrl/bf16": _ppo(MINATAR, 512, encoder="minatar", precision="bf16"),
    }, {"env": MINATAR, "network": "minatar", "batch": 512})
    yield _case("dqn/minatar/b64", {
        "rapidrl": _offpolicy("DQN", MINATAR, 64),
        "rapidrl/bf16": _offpolicy("DQN", MINATAR, 64, precision="bf16"),
    }, {"env": MINATAR, "network": "minatar", "batch": 64})
    yield _case("ppo/mlp64/b64", {
        "rapidrl": _ppo("CartPole-v1", 64),
        "rapidrl/torch": _ppo("CartPole-v1", 64, gradient_backend="torch"),
        "rapidrl/bf16": _ppo("CartPole-v1", 64, precision="bf16"),
    }, {"env": "CartPole-v1", "network": "64x64", "batch": 64})
    if importlib.util.find_spec("ale_py") is not None:
        yield _case("ppo/nature/b256", {
            "rapidrl": _ppo(ATARI, 256),
            "rapidrl/bf16": _ppo(ATARI, 256, precision="bf16"),
            "rapidrl/nchw": _ppo(ATARI, 256, nchw=True),
            "rapidrl/bf16-nchw": _ppo(ATARI, 256, precision="bf16", nchw=True),
            "rapidrl/compile": _ppo(ATARI, 256, compile_policy=True),
            "rapidrl/bf16-compile": _ppo(ATARI, 256, precision="bf16", compile_policy=True),
        }, {"env": ATARI, "network": "nature", "batch": 256})
        yield _case("dqn/nature/b32", {
            "rapidrl": _offpolicy("DQN", ATARI, 32),
            "rapidrl/bf16": _offpolicy("DQN", ATARI, 32, precision="bf16"),
        }, {"env": ATARI, "network": "nature", "batch": 32})
    else:
        ctx.skipped_cases["ppo/nature/b256, dqn/nature/b32"] = "needs ale-py (pip install 'rapidrl[atari]')"
    if importlib.util.find_spec("mujoco") is None:
        ctx.skipped_cases["ppo/mlp256, sac/mlp256"] = "needs mujoco (pip install 'rapidrl[mujoco]')"
        return
    for batch in (64, 256):
        mlp = dict(hidden=(256, 256), activation="relu")
        yield _case(f"ppo/mlp256/b{batch}", {
            "rapidrl": _ppo(MUJOCO, batch, **mlp),
            "rapidrl/torch": _ppo(MUJOCO, batch, gradient_backend="torch", **mlp),
            "rapidrl/bf16": _ppo(MUJOCO, batch, precision="bf16", **mlp),
            "rapidrl/compile": _ppo(MUJOCO, batch, gradient_backend="torch", compile_policy=True, **mlp),
        }, {"env": MUJOCO, "network": "256x256", "batch": batch})
    yield _case("sac/mlp256/b256", {
        "rapidrl": _offpolicy("SAC", MUJOCO, 256),
        "rapidrl/torch": _offpolicy("SAC", MUJOCO, 256, gradient_backend="torch"),
        "rapidrl/bf16": _offpolicy("SAC", MUJOCO, 256, precision="bf16"),
        "rapidrl/compile": _offpolicy("SAC", MUJOCO, 256, gradient_backend="torch", torch_compile=True),
    }, {"env": MUJOCO, "network": "256x256", "batch": 256})
    simba = dict(network="simba", normalize_obs=True, weight_decay=0.01)  # the SimBa preset's networks (docs/simba.md)
    yield _case("sac/simba/b256", {
        "rapidrl": _offpolicy("SAC", MUJOCO, 256),
        "rapidrl/simba": _offpolicy("SAC", MUJOCO, 256, **simba),
        "rapidrl/simba-bf16": _offpolicy("SAC", MUJOCO, 256, precision="bf16", **simba),
    }, {"env": MUJOCO, "network": "256x256 MLP vs SimBa 128x1 actor, 512x2 critics", "batch": 256})

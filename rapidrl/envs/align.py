"""``align``: step a batched env beside reference Gymnasium envs from the same states with the same actions, and
report the first difference.

This is how the built-in families are shown to be exact (``tests/test_envs_alignment.py`` does the same for classic
control), made public for envs written on ``rapidrl.envs.NumbaEnv``. Env i of the batch and reference env i start
each episode from the same state: the reference is reset (seeded) and its state copied into env i
(``envs.set_state(i, state_of(reference))``); with ``load_state`` every other episode goes the other way, from the
batched env's own reset state into the reference, so that its reset distribution is exercised too. Then both take
the same random actions; observations (the final ones where an episode ends), rewards, terminated and truncated flags
are compared at every step, until ``steps`` steps are done or the first difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

__all__ = ["AlignmentReport", "Difference", "align"]


@dataclass
class Difference:
    """The first output that differed: at ``step`` (-1: the start of an episode), env ``env``, output ``field``."""

    step: int
    env: int
    field: str
    ours: object
    reference: object

    def __str__(self) -> str:
        when = "at an episode start" if self.step < 0 else f"at step {self.step}"
        return f"{self.field} of env {self.env} differs {when}: ours {self.ours!r}, reference {self.reference!r}"


@dataclass
class AlignmentReport:
    """What ``align`` compared: ``steps`` steps of ``num_envs`` envs, ``episodes`` episode ends (``terminated``/
    ``truncated``), and the first ``difference`` (None: everything agreed)."""

    num_envs: int
    steps: int = 0
    episodes: int = 0
    terminated: int = 0
    truncated: int = 0
    difference: Difference | None = None
    ok: bool = field(init=False, default=True)

    def __post_init__(self):
        self.ok = self.difference is None

    def __str__(self) -> str:
        head = (f"{self.steps} steps of {self.num_envs} envs, {self.episodes} episode ends ({self.terminated} "
                f"terminated, {self.truncated} truncated)")
        return f"{head}: identical" if self.ok else f"{head}: {self.difference}"


def _default_state_of(ref: gym.Env) -> np.ndarray:
    return np.asarray(ref.unwrapped.state)


def align(envs, reference: Callable[[], gym.Env], *, steps: int = 1000, seed: int = 0,
          state_of: Callable[[gym.Env], object] = _default_state_of,
          load_state: Callable[[gym.Env, np.ndarray], None] | None = None,
          obs_of: Callable[[object], np.ndarray] | None = None, actions=None, rtol: float = 1e-6,
          atol: float = 1e-6) -> AlignmentReport:
    """Step ``envs`` and ``envs.num_envs`` reference envs side by side; return an ``AlignmentReport``.

    Args:
        envs: a batched env with ``set_state(i, values)`` and ``get_state(i)`` (``rapidrl.envs.NumbaVecEnv``) in
            ``autoreset_mode="same_step"``, single-agent.
        reference: makes one reference env, e.g. ``lambda: gymnasium.make("Taxi-v4")`` (its ``TimeLimit`` is
            compared with the batched env's truncation).
        steps: steps to compare.
        seed: seeds the references' resets (env i's episode k: ``seed + 1000 * i + k``) and the actions.
        state_of: the reference env's state as the batched env's state of one env (default
            ``ref.unwrapped.state``).
        load_state: writes one env's state of the batched env into the reference (after ``ref.reset()``); when
            given, every other episode starts from the batched env's own reset state.
        obs_of: a reference observation as the batched env's observation row (default: as is).
        actions: a list of ``steps`` batched actions (default: samples of ``envs.action_space``).
        rtol, atol: tolerances of the observation and reward comparisons (0 for bitwise).
    """
    if envs.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
        raise ValueError("align needs the batched env in autoreset_mode='same_step'")
    n = envs.num_envs
    obs_of = obs_of or (lambda o: np.asarray(o))
    if actions is None:
        sampler = gym.vector.utils.batch_space(envs.single_action_space, n)
        sampler.seed(seed)
        actions = [sampler.sample() for _ in range(steps)]
    refs = [reference() for _ in range(n)]
    report = AlignmentReport(n)
    episode = np.zeros(n, np.int64)

    def differs(a, b) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            return a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol)
        return not np.array_equal(a, b)

    def start(i: int) -> Difference | None:
        """A new episode of env i from a shared state."""
        ref = refs[i]
        if load_state is not None and episode[i] % 2:  # the batched env's own reset state -> the reference
            ref.reset()
            load_state(ref, envs.get_state(i))
            return None
        ref_obs, _ = ref.reset(seed=seed + 1000 * i + int(episode[i]))
        ours = envs.set_state(i, state_of(ref))
        want = obs_of(ref_obs)
        return Difference(-1, i, "observation", ours.copy(), want) if differs(ours, want) else None

    envs.reset(seed=seed)
    try:
        for i in range(n):
            if (d := start(i)) is not None:
                report.difference = d
                return _done(report)
        for t, a in enumerate(actions):
            obs, rewards, terminated, truncated, info = envs.step(a)
            for i, ref in enumerate(refs):
                act = a[i].item() if isinstance(envs.single_action_space, gym.spaces.Discrete) else a[i]
                r_obs, r_rew, r_term, r_trunc, _ = ref.step(act)
                done = bool(terminated[i] or truncated[i])
                ours_obs = info["final_obs"][i] if done else obs[i]
                for name, ours, theirs in (("terminated", bool(terminated[i]), bool(r_term)),
                                           ("truncated", bool(truncated[i]), bool(r_trunc)),
                                           ("reward", rewards[i], np.float32(r_rew)),
                                           ("final observation" if done else "observation", ours_obs, obs_of(r_obs))):
                    if differs(ours, theirs):
                        report.difference = Difference(t, i, name, np.copy(ours), theirs)
                        return _done(report)
            report.steps = t + 1
            ended = np.flatnonzero(np.asarray(terminated) | np.asarray(truncated))
            report.episodes += len(ended)
            report.terminated += int(np.sum(terminated))
            report.truncated += int(np.sum(truncated))
            for i in ended.tolist():
                episode[i] += 1
                if (d := start(i)) is not None:
                    report.difference = Difference(t, i, d.field, d.ours, d.reference)
                    return _done(report)
    finally:
        for ref in refs:
            ref.close()
    return _done(report)


def _done(report: AlignmentReport) -> AlignmentReport:
    report.ok = report.difference is None
    return report

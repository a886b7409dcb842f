"""``check(envs)``: the vector-env contract every rapidrl env keeps, checked on any ``gymnasium.vector.VectorEnv``.

The contract (docs/envs.md):

- spaces: ``observation_space``/``action_space`` are the single spaces batched over ``num_envs``; ``metadata``
  names the ``autoreset_mode``;
- outputs: ``reset(seed=...)`` gives ``(obs, info)``, ``step(actions)`` gives ``(obs, rewards, terminated,
  truncated, info)`` with obs ``[N, *obs_shape]`` of the space's dtype and inside it, rewards ``[N]`` numeric,
  flags ``[N]`` bool;
- determinism: the same seed and actions give the same outputs, bit for bit;
- autoreset: SAME_STEP: ``info["final_obs"]`` holds the final observation of every row whose episode ended
  (``info["_final_obs"]``), inside the space; NEXT_STEP: the step after an episode end is a reset step (reward 0,
  flags False, no statistics);
- episode statistics: ``info["episode"] = {"r", "l"}`` valid where ``info["_episode"]`` (both may be left out of
  a step where no episode ended, as Gymnasium's wrapper does): the return and length of the episode that ended,
  equal to the sum and count of the rewards ``step`` returned since that row's last episode (rows marked inactive
  by ``info["active"]`` do not count); with ``strict_episodes`` every episode end carries them;
- action masks (an env whose reset and step infos hold ``info["action_mask"]``, docs/masks.md): a bool ``[N, M]``
  (M: n of a Discrete space, ``sum(nvec)`` of a MultiDiscrete one) with at least one valid action in every row, and
  in SAME_STEP ``info["final_action_mask"]`` of the same shape (a finished game's final state may have none valid);
  ``check`` then steps with actions sampled from the masked distribution on random logits (the compiled sampler of
  the fused collectors, ``rapidrl.kernels.distributions``) and fails if a sampled action is ever invalid; the masks
  are part of the determinism check;
- bad input: actions of the wrong shape or out of range raise an exception (checked on rapidrl's envs by default:
  Gymnasium's own vector envs do not promise it);
- indices in range: an env written as Numba functions (``NumbaVecEnv``) first runs the same actions in the
  bounds-checked mode (``NumbaVecEnv.bounds_checked``), so an index out of range in its functions raises an
  ``IndexError`` naming the function, the array and the index (unchecked, such a write corrupts the arena and shows
  up later as a wrong statistic or lost determinism).

``check`` steps the env and raises ``EnvContractError`` at the first violation, naming the step, the row and what
differs; it returns a ``CheckReport`` of what it saw (episode ends must occur, else autoreset and statistics were
not exercised: pass more ``steps`` or a shorter time limit).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rapidrl.envs.core.actions import mask_sizes
from rapidrl.envs.core.base import ActionMaskError
from rapidrl.kernels.distributions import apply_action_mask, categorical_sample, log_sum_exp

__all__ = ["CheckReport", "EnvContractError", "check"]


class EnvContractError(AssertionError):
    """A vector env broke the contract ``check`` verifies (the message says where)."""


@dataclass
class CheckReport:
    """What ``check`` saw: steps taken (per run), episode ends, and which parts of the contract were checked."""

    env: str
    num_envs: int
    autoreset_mode: str
    steps: int
    episodes: int
    terminated: int
    truncated: int
    determinism: bool
    statistics: bool
    bad_input: bool
    bounds_checked: bool = False
    action_masks: bool = False

    def __str__(self) -> str:
        parts = [f"{self.env}: {self.num_envs} envs, {self.autoreset_mode}, {self.steps} steps, {self.episodes} "
                 f"episode ends ({self.terminated} terminated, {self.truncated} truncated)"]
        checked = [name for name in ("determinism", "statistics", "bad_input", "bounds_checked", "action_masks")
                   if getattr(self, name)]
        return parts[0] + (f"; checked {', '.join(checked)}" if checked else "")


def _np(x) -> np.ndarray:
    """A NumPy array of ``x`` (a torch tensor is copied to the host)."""
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _fail(message: str):
    raise EnvContractError(message)


def _check_rows(space: gym.Space, x: np.ndarray, what: str) -> None:
    """Every row of ``x`` is an element of ``space`` (shape, dtype, bounds)."""
    if x.shape[1:] != space.shape:
        _fail(f"{what} has rows of shape {x.shape[1:]}, the space's shape is {space.shape}")
    if space.dtype is not None and x.dtype != space.dtype:
        _fail(f"{what} has dtype {x.dtype}, the space's dtype is {space.dtype}")
    if isinstance(space, gym.spaces.Box):
        axes = tuple(range(1, x.ndim))
        bad = ~(np.all(x >= space.low, axis=axes) & np.all(x <= space.high, axis=axes))
        if space.dtype.kind == "f":
            bad |= ~np.all(np.isfinite(x) | np.isinf(space.low) | np.isinf(space.high), axis=axes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            _fail(f"{what}[{i}] = {x[i]!r} is outside the observation space {space}")
        return
    for i, row in enumerate(x):
        if not space.contains(row):
            _fail(f"{what}[{i}] = {row!r} is not in the observation space {space}")


def _check_mask(mask, n: int, sizes: list[int], what: str, require_valid) -> np.ndarray:
    """``mask`` is a bool [n, sum(sizes)] array with a valid action in every component of the rows ``require_valid``
    (True: all, False: none, or a bool [n]); returns it as NumPy."""
    m = _np(mask)
    width = sum(sizes)
    if m.shape != (n, width) or m.dtype != np.bool_:
        _fail(f"{what} must be a bool array of shape ({n}, {width}), got {m.dtype} {m.shape}")
    if np.any(require_valid):
        start = 0
        for size in sizes:
            none = ~m[:, start:start + size].any(1) & require_valid
            if none.any():
                _fail(f"{what}: row {int(np.flatnonzero(none)[0])} has no valid action"
                      + (f" in component [{start}, {start + size})" if len(sizes) > 1 else ""))
            start += size
    return m


class _MaskedActions:
    """Actions sampled from the masked categorical distribution on random logits (seeded), as the fused collectors
    sample (``apply_action_mask``, ``log_sum_exp``, ``categorical_sample``); fails when one is invalid."""

    def __init__(self, space: gym.Space, n: int, seed: int):
        self.space, self.n, self.sizes = space, n, mask_sizes(space)
        self.rng = np.random.default_rng(seed)

    def __call__(self, mask: np.ndarray, where: str, free: np.ndarray) -> np.ndarray:
        """Actions for ``mask`` [n, M]; rows ``free`` [n] (NEXT_STEP reset steps: their actions are not used) get any
        action."""
        out = np.zeros((self.n, len(self.sizes)), np.int64)
        logits = self.rng.standard_normal((self.n, sum(self.sizes))).astype(np.float32)
        u = self.rng.random((self.n, len(self.sizes)))
        for i in range(self.n):
            start = 0
            for c, size in enumerate(self.sizes):
                row, valid = logits[i, start:start + size], mask[i, start:start + size]
                apply_action_mask(row, valid)
                a = categorical_sample(row, log_sum_exp(row), u[i, c])
                if not valid[a] and not free[i]:
                    _fail(f"{where}: the masked sampler picked invalid action {a} for row {i}")
                out[i, c] = a
                start += size
        if isinstance(self.space, gym.spaces.Discrete):
            return out[:, 0] + int(self.space.start)
        if isinstance(self.space, gym.spaces.MultiDiscrete):
            return (out.reshape(self.n, *self.space.shape) + self.space.start).astype(self.space.dtype)
        return out.reshape(self.n, *self.space.shape).astype(self.space.dtype)


def _rollout(envs, actions, seed: int, checks: bool, strict: bool, statistics: bool) -> tuple[list, dict]:
    """Reset with ``seed``, step through ``actions`` (a list of batches, or ``(steps, _MaskedActions)``: actions
    sampled from each step's masks); check each output (if ``checks``); return the outputs and the episode counts."""
    n = envs.num_envs
    same_step = envs.metadata.get("autoreset_mode") == AutoresetMode.SAME_STEP
    obs_space = envs.single_observation_space
    out = []
    try:
        reset = envs.reset(seed=seed)
    except ActionMaskError as e:  # the env core refuses it itself: said as check says it
        _fail(f"reset() info['action_mask']: row {e.row} has no valid action ({e})")
    if not (isinstance(reset, tuple) and len(reset) == 2 and isinstance(reset[1], dict)):
        _fail(f"reset() must return (obs, info dict), got {type(reset).__name__}")
    obs = _np(reset[0])
    if checks:
        if obs.shape[:1] != (n,):
            _fail(f"reset() returned observations of shape {obs.shape}, expected ({n}, *{obs_space.shape})")
        _check_rows(obs_space, obs, "reset() observation")
    out.append(obs.copy())
    sizes = mask_sizes(envs.single_action_space)
    masked = "action_mask" in reset[1]
    if masked and sizes is None:
        _fail(f"reset() info holds 'action_mask' but the action space {envs.single_action_space} takes no masks "
              "(Discrete, MultiDiscrete or MultiBinary)")
    mask = _check_mask(reset[1]["action_mask"], n, sizes, "reset() info['action_mask']", True) if masked else None
    sampled = isinstance(actions, tuple)
    steps, sampler = actions if sampled else (len(actions), None)
    if sampled and not masked:
        _fail("reset() info holds no 'action_mask' (the env's has_action_masks said it has masks)")
    ret = np.zeros(n, np.float32)  # manual episode statistics
    length = np.zeros(n, np.int64)
    ended_before = np.zeros(n, bool)  # NEXT_STEP: rows whose episode ended on the previous step
    counts = {"episodes": 0, "terminated": 0, "truncated": 0}
    for t in range(steps):
        a = sampler(mask, f"step {t}", ended_before) if sampled else actions[t]
        try:
            result = envs.step(a)
        except ActionMaskError as e:
            _fail(f"step {t}: info['action_mask']: row {e.row} has no valid action ({e})")
        if not (isinstance(result, tuple) and len(result) == 5 and isinstance(result[4], dict)):
            _fail(f"step() must return (obs, rewards, terminated, truncated, info dict), got {result!r:.80}")
        obs, rewards, term, trunc = (_np(x) for x in result[:4])
        info = result[4]
        where = f"step {t}"
        done = term | trunc if term.dtype == bool and trunc.dtype == bool else None
        if checks:
            if obs.shape[:1] != (n,):
                _fail(f"{where}: observations of shape {obs.shape}, expected ({n}, *{obs_space.shape})")
            _check_rows(obs_space, obs, f"{where}: observation")
            for name, x in (("rewards", rewards), ("terminated", term), ("truncated", trunc)):
                if x.shape != (n,):
                    _fail(f"{where}: {name} has shape {x.shape}, expected ({n},)")
            if rewards.dtype.kind not in "fiu":
                _fail(f"{where}: rewards have dtype {rewards.dtype}, expected a numeric dtype")
            if done is None:
                _fail(f"{where}: terminated/truncated have dtypes {term.dtype}/{trunc.dtype}, expected bool")
            if same_step:
                if "final_obs" not in info or "_final_obs" not in info:
                    _fail(f"{where}: SAME_STEP info must hold 'final_obs' and '_final_obs'")
                has_final = _np(info["_final_obs"]).astype(bool)
                missing = done & ~has_final
                if missing.any():
                    _fail(f"{where}: row {int(np.flatnonzero(missing)[0])} ended without info['_final_obs']")
                if done.any():
                    final = info["final_obs"]
                    final = np.stack([_np(f) for f in final[done]]) if final.dtype == object else _np(final)[done]
                    _check_rows(obs_space, final, f"{where}: final_obs (rows that ended)")
            elif ended_before.any():
                rows = ended_before
                if (_np(rewards)[rows] != 0).any() or term[rows].any() or trunc[rows].any():
                    _fail(f"{where}: NEXT_STEP: the step after an episode end must be a reset step (reward 0, "
                          f"flags False) for rows {np.flatnonzero(rows).tolist()}")
        if statistics:
            if ("episode" in info) != ("_episode" in info):
                _fail(f"{where}: info must hold both 'episode' {{'r', 'l'}} and '_episode', or neither")
            has = _np(info["_episode"]).astype(bool) if "_episode" in info else np.zeros(n, bool)
            active = _np(info["active"]).astype(bool) if "active" in info else np.ones(n, bool)
            counted = active & ~ended_before
            ret[counted] += _np(rewards)[counted].astype(np.float32)
            length[counted] += 1
            if (has & ~done).any():
                _fail(f"{where}: row {int(np.flatnonzero(has & ~done)[0])} reports an episode statistic but its "
                      "episode did not end")
            if strict and (done & active & ~has).any():
                _fail(f"{where}: row {int(np.flatnonzero(done & active & ~has)[0])} ended its episode without "
                      "info['_episode']")
            r, length_out = (_np(info["episode"]["r"]), _np(info["episode"]["l"])) if has.any() else (None, None)
            for i in np.flatnonzero(has):
                if int(length_out[i]) != length[i]:
                    _fail(f"{where}: row {i}: episode length {length_out[i]} but {length[i]} steps were counted")
                if not np.isclose(r[i], ret[i], rtol=1e-5, atol=1e-5 * max(1.0, abs(float(ret[i])))):
                    _fail(f"{where}: row {i}: episode return {r[i]} but the rewards sum to {ret[i]}")
            ret[has] = 0.0
            length[has] = 0
            counts["episodes"] += int(has.sum())
        elif done is not None:
            counts["episodes"] += int(done.sum())
        counts["terminated"] += int(term.sum())
        counts["truncated"] += int(trunc.sum())
        ended_before = done.copy() if done is not None and not same_step else np.zeros(n, bool)
        record = [obs.copy(), rewards.copy(), term.copy(), trunc.copy()]
        if masked:
            if "action_mask" not in info:
                _fail(f"{where}: info holds no 'action_mask' (reset's did)")
            # NEXT_STEP: a row whose episode ended shows its final observation, whose state may have no valid action
            mask = _check_mask(info["action_mask"], n, sizes, f"{where}: info['action_mask']",
                               True if same_step or done is None else ~done)
            record.append(mask.copy())
            if same_step and done is not None and done.any():
                if "final_action_mask" not in info:
                    _fail(f"{where}: SAME_STEP info of an env with action masks must hold 'final_action_mask'")
                final_mask = _check_mask(info["final_action_mask"], n, sizes, f"{where}: info['final_action_mask']",
                                         False)
                record.append(final_mask[done].copy())
        final = info.get("final_obs") if same_step else None
        if final is not None and done is not None and done.any() and final.dtype != object:
            record.append(_np(final)[done].copy())
        out.append(record)
    return out, counts


def _same(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _check_bad_input(envs, seed: int) -> None:
    """Actions of the wrong shape, and out of range (Discrete) or NaN (Box), raise an exception."""
    space, n = envs.single_action_space, envs.num_envs
    envs.reset(seed=seed)
    bad = [("of the wrong shape", np.zeros((n + 1, *space.shape), space.dtype))]
    if isinstance(space, gym.spaces.Discrete):
        bad.append(("out of range", np.full(n, int(space.start + space.n), np.int64)))
    elif isinstance(space, gym.spaces.Box) and space.dtype.kind == "f":
        bad.append(("holding NaN", np.full((n, *space.shape), np.nan, space.dtype)))
    for what, actions in bad:
        try:
            envs.step(actions)
        except Exception:
            continue
        _fail(f"step() accepted actions {what}; it must raise a clear error")


def check(envs: gym.vector.VectorEnv, *, seed: int = 0, steps: int = 300, actions=None, determinism: bool = True,
          statistics: bool = True, strict_episodes: bool = True, bad_input: bool | None = None,
          require_episode_end: bool = True, bounds_check: bool = True) -> CheckReport:
    """Check ``envs`` against the vector-env contract (see the module docstring); raise ``EnvContractError``.

    Args:
        envs: any ``gymnasium.vector.VectorEnv`` (reset and stepped here; not closed).
        seed: the reset seed (and the action sampler's).
        steps: steps per run; the run happens twice when ``determinism``.
        actions: a list of batched actions to step with (default: ``steps`` samples of ``envs.action_space``; for an
            env with action masks, ``steps`` samples of the masked distribution on random logits, each checked valid).
        determinism: a second run from ``reset(seed=seed)`` must give the same outputs bit for bit.
        statistics: check ``info["episode"]``/``info["_episode"]`` against the rewards.
        strict_episodes: every episode end carries its statistics (False for envs whose learner episodes are not
            the statistics' episodes, e.g. Atari with episodic life).
        bad_input: check that bad actions raise (default: for rapidrl's envs).
        require_episode_end: fail if no episode ended (the autoreset and statistics checks would be empty).
        bounds_check: an env written as Numba functions first runs the actions in the bounds-checked mode (an
            ``IndexError`` names a bad index); its kernels compile once per env.
    """
    if not isinstance(envs, gym.vector.VectorEnv):
        _fail(f"envs must be a gymnasium.vector.VectorEnv, got {type(envs).__name__}")
    n = envs.num_envs
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        _fail(f"num_envs must be a positive int, got {n!r}")
    mode = envs.metadata.get("autoreset_mode")
    if not isinstance(mode, AutoresetMode):
        _fail(f"metadata['autoreset_mode'] must be an AutoresetMode, got {mode!r}")
    for name in ("observation", "action"):
        single, batched = getattr(envs, f"single_{name}_space"), getattr(envs, f"{name}_space")
        want = batch_space(single, n)
        if batched.shape != want.shape or batched.dtype != want.dtype:
            _fail(f"{name}_space {batched} is not single_{name}_space {single} batched over {n} envs ({want})")
    masked = "action_mask" in envs.reset(seed=seed)[1]
    if actions is None and masked:
        if mask_sizes(envs.single_action_space) is None:
            _fail(f"reset() info holds 'action_mask' but the action space {envs.single_action_space} takes no masks")

        def actions_of():  # a fresh sampler per run: every run draws the same numbers
            return steps, _MaskedActions(envs.single_action_space, n, seed)
    else:
        if actions is None:
            space = batch_space(envs.single_action_space, n)
            space.seed(seed)
            actions = [space.sample() for _ in range(steps)]
        listed = actions

        def actions_of():
            return listed
    from rapidrl.envs.core.numba_env import NumbaVecEnv

    bounds_checked = bounds_check and isinstance(envs, NumbaVecEnv)
    if bounds_checked and not envs.debug:
        twin = envs.bounds_checked()
        try:
            _rollout(twin, actions_of(), seed, False, strict_episodes, False)
        finally:
            twin.close()
    first, counts = _rollout(envs, actions_of(), seed, True, strict_episodes, statistics)
    taken = len(first) - 1
    if require_episode_end and counts["episodes"] == 0:
        _fail(f"no episode ended in {taken} steps: autoreset and statistics were not exercised (pass more "
              "steps or a shorter max_episode_steps)")
    if determinism:
        second, _ = _rollout(envs, actions_of(), seed, False, strict_episodes, False)
        for t, (a, b) in enumerate(zip(first, second)):
            if not _same(a, b):
                _fail(f"not deterministic: a second run from reset(seed={seed}) with the same actions differs at "
                      f"{'the reset' if t == 0 else f'step {t - 1}'}")
    if bad_input is None:
        from rapidrl.envs.core.base import VecEnvBase

        bad_input = isinstance(envs, VecEnvBase)
    if bad_input:
        _check_bad_input(envs, seed)
    return CheckReport(getattr(envs, "env_id", type(envs).__name__), n, mode.name, taken,
                       counts["episodes"], counts["terminated"], counts["truncated"], determinism, statistics,
                       bool(bad_input), bounds_checked, masked)

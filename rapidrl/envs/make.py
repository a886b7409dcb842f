"""``make_vec``: one entry point for every vector env rapidrl offers.

- built-in ids (``list_builtin_envs()``) on the CPU -> ``BuiltinVecEnv`` (one Numba kernel), or
  ``MinAtarVecEnv`` for the MinAtar ids (``MinAtar/<Game>-v0|v1``; CPU only);
- built-in ids on another device (or ``vectorization="torch"``) -> ``TorchVecEnv`` (PyTorch on the device);
- multi-agent MPE ids (``MPE/simple_spread-v3``) -> ``rapidrl.envs.mpe.SimpleSpreadVecEnv`` (``num_envs`` copies,
  ``num_envs * N`` agent rows; ``rapidrl.envs.multiagent``);
- the partially observed tasks ``CartPoleNoVel-v1`` and ``MemoryCue-v0`` -> their batched envs
  (``rapidrl.envs.pomdp``; with "sync"/"subprocess" their single Gymnasium envs);
- Atari ids (``ALE/<Game>-v5``, ...) -> ``AtariVecEnv`` (ale-py's C++ vector env with the standard
  preprocessing, ``rapidrl.envs.atari``; the "atari" extra);
- any other Gymnasium id -> ``SyncVecEnv`` (in process) or ``SubprocVecEnv`` (worker processes).
"""

from __future__ import annotations

from rapidrl.envs.builtin import BuiltinVecEnv, list_builtin_envs, unknown_env_message
from rapidrl.envs.minatar.ids import MINATAR_ENVS
from rapidrl.envs.pomdp import POMDP_ENVS, make_pomdp, register_envs

register_envs()  # CartPoleNoVel-v1 and MemoryCue-v0 as Gymnasium ids too

VECTORIZATIONS = ("numba", "torch", "sync", "subprocess", "ray", "ale", "mujoco")


def _device_type(device) -> str:
    """'cpu', 'cuda', ... for a str or torch.device; ValueError otherwise (torch imported only if needed)."""
    if isinstance(device, str) and device == "cpu":
        return "cpu"
    import torch

    try:
        return torch.device(device).type
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from e


def _is_gymnasium_id(env_id: str) -> bool:
    import gymnasium as gym

    return env_id in gym.registry


def make_vec(env_id: str, num_envs: int, *, seed: int | None = None, device="cpu", vectorization: str | None = None,
             autoreset_mode="same_step", copy: bool = False, flatten_observations: bool = False, **env_kwargs):
    """Create ``num_envs`` copies of ``env_id`` as one vector env (``gymnasium.vector.VectorEnv`` API).

    Args:
        env_id: a built-in id (``list_builtin_envs()``) or any registered Gymnasium id.
        num_envs: number of envs N (positive int).
        seed: seeds the envs (env i's stream derives from (seed, i)); ``None`` = fresh entropy.
        device: where a ``TorchVecEnv`` keeps its tensors ("cpu", "cuda", "cuda:1", ...).
        vectorization: ``None`` picks "numba" for built-in ids on the CPU, "torch" for built-in ids on
            another device and "sync" otherwise; or explicitly "numba", "torch" (built-ins, any device),
            "sync", "subprocess" or "ray" (any Gymnasium id, built-ins included; "ray" runs the envs in Ray
            actors, see ``rapidrl.dist.ray_vec.RayVecEnv`` for num_workers/max_restarts/actor_options).
            Atari ids default to "ale": ``rapidrl.envs.atari.AtariVecEnv``, preprocessed (its keyword arguments
            go in ``env_kwargs``); "sync"/"subprocess" give the raw Gymnasium env. MuJoCo v5 ids default to
            "mujoco" when the ``mujoco`` package is installed: ``rapidrl.envs.mujoco.MujocoVecEnv``, all envs
            stepped per call, equal to Gymnasium's env step by step.
        autoreset_mode: "same_step" (default; final observation in ``info["final_obs"]``) or "next_step".
        copy: return copies instead of views of the env's preallocated outputs.
        flatten_observations: Gymnasium envs whose observations are Discrete, MultiDiscrete, MultiBinary, Tuple
            or Dict give one vector instead (one-hot parts; float32, or uint8 when images are present and every
            part fits a byte; ``rapidrl.envs.spaces``). The algorithms set it; Box observations are unchanged.
        **env_kwargs: env constants (e.g. ``g=9.81`` for Pendulum-v1, ``max_episode_steps=...``), forwarded
            to ``gymnasium.make`` for wrapped envs.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str, got {type(env_id).__name__}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if vectorization is not None and vectorization not in VECTORIZATIONS:
        raise ValueError(f"vectorization must be None or one of {VECTORIZATIONS}, got {vectorization!r}")
    device_type = _device_type(device)
    if vectorization in (None, "ale") and device_type == "cpu":
        from rapidrl.envs.atari import is_atari_id

        if is_atari_id(env_id):
            from rapidrl.envs.atari import AtariVecEnv

            return AtariVecEnv(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
        if vectorization == "ale":
            raise ValueError(f"vectorization='ale' needs an Atari id such as 'ALE/Breakout-v5', got {env_id!r}")
    if vectorization in (None, "mujoco") and device_type == "cpu":
        from rapidrl.envs.mujoco import is_mujoco_id, mujoco_available

        if is_mujoco_id(env_id) and mujoco_available():
            from rapidrl.envs.mujoco import MujocoVecEnv

            return MujocoVecEnv(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
        if vectorization == "mujoco":
            raise ValueError(f"vectorization='mujoco' needs a MuJoCo v5 id such as 'HalfCheetah-v5' and the mujoco "
                             f"package (pip install 'rapidrl[mujoco]'), got {env_id!r}")
    if env_id.startswith("MPE/"):
        if vectorization not in (None, "numba") or device_type != "cpu":
            raise ValueError(f"{env_id!r} is a built-in multi-agent env: CPU and vectorization='numba' only")
        from rapidrl.envs.mpe import make_mpe

        return make_mpe(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
    if env_id in POMDP_ENVS and vectorization in (None, "numba") and device_type == "cpu":
        return make_pomdp(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
    builtin = env_id in list_builtin_envs()
    if vectorization is None:
        if builtin:
            vectorization = "numba" if device_type == "cpu" else "torch"
        else:
            vectorization = "sync"
    if vectorization in ("numba", "torch") and not builtin:
        if _is_gymnasium_id(env_id):
            raise ValueError(f"{env_id!r} is not a built-in env, and vectorization={vectorization!r} needs one "
                             f"of {', '.join(list_builtin_envs())}; use 'sync' or 'subprocess' for it")
        raise ValueError(unknown_env_message(env_id))
    if vectorization != "torch" and device_type != "cpu":
        raise ValueError(f"vectorization={vectorization!r} runs on the CPU; device={device!r} needs "
                         "vectorization='torch' (built-in envs only)")
    if env_id in MINATAR_ENVS:
        return _make_minatar(env_id, num_envs, vectorization, seed=seed, autoreset_mode=autoreset_mode, copy=copy,
                             **env_kwargs)
    if vectorization == "numba":
        return BuiltinVecEnv(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
    if vectorization == "torch":
        from rapidrl.envs.torch_envs import TorchVecEnv

        return TorchVecEnv(env_id, num_envs, seed=seed, device=device, autoreset_mode=autoreset_mode, **env_kwargs)
    if not builtin and not _is_gymnasium_id(env_id):
        import gymnasium as gym

        raise ValueError(unknown_env_message(env_id, list(gym.registry)))
    source, count = env_id, num_envs
    if flatten_observations:
        import functools

        import gymnasium as gym

        from rapidrl.envs.spaces import flattened

        source, count = [flattened(functools.partial(gym.make, env_id, **env_kwargs))] * num_envs, None
        env_kwargs = {}
    if vectorization == "sync":
        from rapidrl.envs.gym_vec import SyncVecEnv

        env = SyncVecEnv(source, count, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
    elif vectorization == "ray":
        from rapidrl.dist.ray_vec import RayVecEnv

        env = RayVecEnv(source, count, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
    else:
        from rapidrl.envs.subproc import SubprocVecEnv

        env = SubprocVecEnv(source, count, seed=seed, autoreset_mode=autoreset_mode, copy=copy, **env_kwargs)
    env.env_id = env_id
    return env


def _make_minatar(env_id: str, num_envs: int, vectorization: str, **kwargs):
    """MinAtar: the built-in kernels ("numba"), or the ``minatar`` package's Gymnasium envs ("sync", ...)."""
    if vectorization == "torch":
        raise ValueError(f"vectorization='torch' is not available for {env_id!r}; MinAtar runs on the CPU "
                         "(vectorization='numba', the default)")
    if vectorization == "numba":
        from rapidrl.envs.minatar import MinAtarVecEnv

        return MinAtarVecEnv(env_id, num_envs, **kwargs)
    import gymnasium as gym

    if env_id not in gym.registry:  # the package registers its ids only through gymnasium's entry points
        from minatar.gym import register_envs

        register_envs()
    if vectorization == "sync":
        from rapidrl.envs.gym_vec import SyncVecEnv

        return SyncVecEnv(env_id, num_envs, **kwargs)
    if vectorization == "ray":
        from rapidrl.dist.ray_vec import RayVecEnv

        return RayVecEnv(env_id, num_envs, **kwargs)
    from rapidrl.envs.subproc import SubprocVecEnv

    return SubprocVecEnv(env_id, num_envs, **kwargs)

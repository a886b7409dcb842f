"""``make_vec``: one entry point for every vector env rapidrl offers, reading the family table (``registry.py``).

- an id of a family (``rapidrl list envs``) -> that family's vector env: classic control and the other envs written
  as Numba functions (``NumbaVecEnv``; classic control on another device: ``TorchVecEnv``), MinAtar, the partially
  observed tasks, MPE (``num_envs`` copies, ``num_envs * N`` agent rows), Atari (ale-py's C++ vector env with the
  standard preprocessing), MuJoCo (all simulations per call);
- any other Gymnasium id, or a family's id with ``vectorization`` "sync", "subprocess" or "ray" (where the family's
  ids are Gymnasium ids too) -> the Gymnasium adapters;
- a ``NumbaEnv`` (an env written as Numba functions, not registered) -> its ``NumbaVecEnv``;
- ``"module:EnvId"`` -> ``module`` imported first (it registers ``EnvId``), as ``gymnasium.make`` does.
"""

from __future__ import annotations

from rapidrl.envs import registry
from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv
from rapidrl.envs.pomdp import register_envs

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


def make_vec(env_id, num_envs: int, *, seed: int | None = None, device="cpu", vectorization: str | None = None,
             autoreset_mode="same_step", copy: bool = False, flatten_observations: bool = False, debug: bool = False,
             **env_kwargs):
    """Create ``num_envs`` copies of ``env_id`` as one vector env (``gymnasium.vector.VectorEnv`` API).

    Args:
        env_id: an id of a family (``rapidrl.envs.list_envs()``, a registered or installed env included), any
            registered Gymnasium id, ``"module:EnvId"`` (imports ``module`` first), or a ``NumbaEnv``.
        num_envs: number of envs N (positive int; multi-agent ids: env copies).
        seed: seeds the envs (env i's stream derives from (seed, i)); ``None`` = fresh entropy.
        device: where a ``TorchVecEnv`` keeps its tensors ("cpu", "cuda", "cuda:1", ...).
        vectorization: ``None`` picks the family's own (envs written as Numba functions: "numba", or "torch" for
            classic control on another device; Atari: "ale"; MuJoCo: "mujoco" when the ``mujoco`` package is
            installed) and "sync" for other Gymnasium ids; or explicitly "numba", "torch" (classic control, any
            device), "sync", "subprocess" or "ray" (any Gymnasium id, the families' included; "ray" runs the envs in
            Ray actors, see ``rapidrl.envs.adapters.ray.RayVecEnv`` for num_workers/max_restarts/actor_options).
            For Atari, "sync"/"subprocess" give the raw Gymnasium env.
        autoreset_mode: "same_step" (default; final observation in ``info["final_obs"]``) or "next_step".
        copy: return copies instead of views of the env's preallocated outputs.
        flatten_observations: Gymnasium envs whose observations are Discrete, MultiDiscrete, MultiBinary, Tuple
            or Dict give one vector instead (one-hot parts; float32, or uint8 when images are present and every
            part fits a byte; ``rapidrl.envs.spaces``). The algorithms set it; Box observations are unchanged.
        debug: envs written as Numba functions run in the bounds-checked mode (``NumbaEnv.debug``): an index out of
            range in their functions raises an ``IndexError`` naming the function, the array and the index.
        **env_kwargs: env constants (e.g. ``g=9.81`` for Pendulum-v1, ``max_episode_steps=...``), forwarded
            to ``gymnasium.make`` for wrapped envs.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if vectorization is not None and vectorization not in VECTORIZATIONS:
        raise ValueError(f"vectorization must be None or one of {VECTORIZATIONS}, got {vectorization!r}")
    if not isinstance(debug, bool):
        raise TypeError(f"debug must be True or False, got {debug!r}")
    device_type = _device_type(device)
    common = dict(seed=seed, autoreset_mode=autoreset_mode, copy=copy)
    if isinstance(env_id, NumbaEnv):
        if vectorization not in (None, "numba") or device_type != "cpu":
            raise ValueError("a NumbaEnv runs on the CPU with vectorization='numba'")
        return NumbaVecEnv(env_id, num_envs, debug=debug, **common, **env_kwargs)
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str or a rapidrl.envs.NumbaEnv, got {type(env_id).__name__}")
    given, env_id = env_id, registry.import_env_module(env_id)
    if debug:  # only envs written as Numba functions take it
        not_numba = ValueError(f"debug=True (the bounds-checked mode) is for envs written as Numba functions; "
                               f"{given!r} is not one")
        try:
            envs = _make(env_id, num_envs, vectorization, device, device_type, False, common,
                         dict(env_kwargs, debug=True), gymnasium=False)
        except TypeError as e:
            if "debug" not in str(e):
                raise
            raise not_numba from None
        if not isinstance(envs, NumbaVecEnv):
            envs.close()
            raise not_numba
        return envs
    try:
        envs = _make(env_id, num_envs, vectorization, device, device_type, flatten_observations, common, env_kwargs)
    except ValueError as e:
        if given == env_id or not str(e).startswith("unknown env id"):
            raise
        raise ValueError(f"env id {given!r}: module {given.partition(':')[0]!r} was imported but registered no env "
                         f"{env_id!r} (with rapidrl.envs.register or gymnasium.register)") from None
    if given != env_id and not isinstance(envs, NumbaVecEnv):
        envs.env_id = given  # what a model trained on it records: the module is imported again on load
    return envs


def _make(env_id: str, num_envs: int, vectorization, device, device_type: str, flatten_observations: bool,
          common: dict, env_kwargs: dict, gymnasium: bool = True):
    """``make_vec`` for an id (``module:`` already imported); ``gymnasium``: False raises TypeError naming ``debug``
    instead of making a Gymnasium adapter."""
    family = registry.family_of(env_id)
    if family is not None:
        choice = vectorization
        if choice is None:
            choice = family.vectorizations[0] if device_type == "cpu" else family.device_vectorization
            if choice is None:
                raise ValueError(f"{env_id!r} ({family.name}) runs on the CPU; device={device!r} is not supported")
        if choice in family.vectorizations:
            if device_type != "cpu" and choice != family.device_vectorization:
                raise ValueError(f"vectorization={choice!r} runs on the CPU; device={device!r} needs "
                                 "vectorization='torch' (classic control only)")
            return family.make(env_id, num_envs, vectorization=choice, device=device, **common, **env_kwargs)
        if choice not in registry.GYMNASIUM_VECTORIZATIONS or not family.gymnasium:
            takes = family.vectorizations + (registry.GYMNASIUM_VECTORIZATIONS if family.gymnasium else ())
            raise ValueError(f"vectorization={choice!r} is not available for {env_id!r} ({family.name}): it takes "
                             f"{', '.join(takes)}")
        if family.gymnasium_setup is not None:
            family.gymnasium_setup()
    elif vectorization in ("numba", "torch", "ale", "mujoco"):
        if _is_gymnasium_id(env_id):
            raise ValueError(f"{env_id!r} is not a built-in env, and vectorization={vectorization!r} needs one of "
                             f"{', '.join(registry.list_builtin_envs())}; use 'sync' or 'subprocess' for it")
        raise ValueError(registry.unknown_env_message(env_id))
    elif not _is_gymnasium_id(env_id):
        import gymnasium as gym

        raise ValueError(registry.unknown_env_message(env_id, list(gym.registry)))
    if not gymnasium:
        raise TypeError("debug: not for a Gymnasium adapter")
    if device_type != "cpu":
        raise ValueError(f"vectorization={vectorization or 'sync'!r} runs on the CPU; device={device!r} needs "
                         "vectorization='torch' (classic control only)")
    return _make_gymnasium(env_id, num_envs, vectorization or "sync", flatten_observations, common, env_kwargs)


def _make_gymnasium(env_id: str, num_envs: int, vectorization: str, flatten: bool, common: dict, env_kwargs: dict):
    """N Gymnasium envs of ``env_id`` through an adapter ("sync", "subprocess" or "ray"). ``action_masks`` (a
    keyword of ``SyncVecEnv``, not of the env) goes to the adapter."""
    source, count = env_id, num_envs
    env_kwargs = dict(env_kwargs)
    adapter_kwargs = {"action_masks": env_kwargs.pop("action_masks")} if "action_masks" in env_kwargs else {}
    if adapter_kwargs and vectorization != "sync":
        raise ValueError(f"action_masks is taken by vectorization='sync' only (the {vectorization!r} adapter steps "
                         "its envs without masks)")
    from rapidrl.envs.adapters import robotics

    robotic = robotics.is_robotics_id(env_id)
    if robotic:  # gymnasium-robotics on MuJoCo 4: its joint-type checks (adapters/robotics.py)
        robotics.fix_joint_type_checks()
    if flatten:
        import functools

        import gymnasium as gym

        from rapidrl.envs.spaces import flattened

        maker = robotics.make if robotic else gym.make
        source, count = [flattened(functools.partial(maker, env_id, **env_kwargs))] * num_envs, None
        env_kwargs = {}
    if vectorization == "sync":
        from rapidrl.envs.adapters.gymnasium import SyncVecEnv as cls
    elif vectorization == "ray":
        from rapidrl.envs.adapters.ray import RayVecEnv as cls
    else:
        from rapidrl.envs.adapters.subprocess import SubprocVecEnv as cls
    env = cls(source, count, **common, **adapter_kwargs, **env_kwargs)
    env.env_id = env_id
    return env

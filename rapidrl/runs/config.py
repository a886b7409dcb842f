"""Run configuration (layered TOML), presets and run directories: what the ``rapidrl`` command reads and writes.

A run is described by three TOML sections::

    [run]   algo, env, timesteps, seed, eval_episodes, checkpoint_every, checkpoint_keep
    [algo]  fields of the algorithm's config dataclass (e.g. rapidrl.algos.PPOConfig)
    [env]   keyword arguments of the environment (e.g. max_episode_steps)

Layers, later wins: algorithm defaults < preset ``configs/<algo>_<env>.toml`` (picked automatically when
present) < ``--config FILE`` < ``--set section.key=value``. Unknown sections and keys fail at load with a
suggestion. TOML has no null: the string "none" means None for fields that accept it.

A run directory ``runs/<algo>-<env>-<YYYYmmdd-HHMMSS>[-n]/`` holds the resolved ``config.toml``,
``metrics.csv``, TensorBoard event files, ``monitor.bin`` (live metrics), ``checkpoints/``,
``model.pt``, ``summary.json`` and, for detached runs, ``train.log``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
import time
import types
import typing
from pathlib import Path
from typing import Any

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from rapidrl.algos.registry import get_algorithm
from rapidrl.runs.layout import CONFIG_FILE
from rapidrl.runs.lock import RunLock
from rapidrl.train.config import ConfigError, check_known_keys, config_from_dict, config_to_dict, upgrade_legacy

PRESETS_DIR = Path(__file__).resolve().parents[1] / "configs"
SECTIONS = ("run", "algo", "env")
PATHS_SECTION = "paths"
"""Written by a run into its config.toml: the implementation each path setting resolved to and why
(``rapidrl.train.paths``). Informational: it is not read back as a setting (set the paths in [algo])."""


@dataclasses.dataclass
class RunSettings:
    """The [run] section."""

    algo: str = ""
    """Algorithm name (``rapidrl list algos``)."""
    env: str = ""
    """Environment id: a built-in (``rapidrl list envs``) or any Gymnasium id."""
    timesteps: int = 100_000
    """Total environment steps (over all envs)."""
    seed: int | None = 0
    """Seed of the run (sets the algorithm's seed); "none" for a nondeterministic run."""
    eval_episodes: int = 10
    """Episodes of the final evaluation (0 skips it)."""
    checkpoint_every: int = 0
    """Save a resumable checkpoint every this many steps (0: every tenth of the run)."""
    checkpoint_keep: int = 3
    """Periodic checkpoints kept (the newest); the final one is always kept."""
    wandb: bool = False
    """Also log to Weights & Biases in offline mode (needs ``pip install wandb``)."""
    mlflow: bool = False
    """Also log to MLflow, in RUN_DIR/mlflow.db unless MLFLOW_TRACKING_URI is set (needs the ``track`` extra)."""


def env_slug(env_id: str) -> str:
    """"CartPole-v1" -> "cartpole" (the preset file name part); "module:EnvId" is named by its EnvId
    ("gymnasium_robotics:FetchReach-v4" -> "fetchreach")."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"-v\d+$", "", env_id.rpartition(":")[2].lower()))


def env_family(env_id: str) -> str | None:
    """"atari" for ALE ids (``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``), "minatar" for ``MinAtar/<Game>-v*``,
    else None: a family preset (``<algo>_atari.toml``) applies to every game of the family."""
    if env_id.startswith("ALE/") or env_id.endswith(("NoFrameskip-v4", "NoFrameskip-v0")):
        return "atari"
    if env_id.startswith("MinAtar/"):
        return "minatar"
    return None


def preset_path(algo: str, env_id: str) -> Path:
    """``configs/<algo>_<env slug>.toml``; when that file does not exist and the env belongs to a family
    (``env_family``), ``configs/<algo>_<family>.toml``."""
    path = PRESETS_DIR / f"{algo}_{env_slug(env_id)}.toml"
    family = env_family(env_id)
    if family is not None and not path.is_file():
        return PRESETS_DIR / f"{algo}_{family}.toml"
    return path


def list_presets() -> list[Path]:
    """Preset files shipped in configs/."""
    return sorted(PRESETS_DIR.glob("*.toml")) if PRESETS_DIR.is_dir() else []


def read_toml(path: str | os.PathLike, *, run_file: bool = False) -> dict[str, Any]:
    """Parse a TOML file; missing files and syntax errors raise ConfigError naming the file. A [paths] section as
    a run writes it (what its path settings resolved to) is dropped: it records, it does not set; run_file: the
    file is a run's config.toml, whose [paths] section is dropped whatever it holds."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from None
    if PATHS_SECTION in data:
        section = data[PATHS_SECTION]
        written = isinstance(section, dict) and all(isinstance(v, dict) and set(v) == {"value", "reason"}
                                                    for v in section.values())
        if not (run_file or written):
            raise ConfigError(f"{path}: [{PATHS_SECTION}] is written by a run (what its path settings resolved to) "
                              "and never read; set gradient_backend or collection in [algo] instead")
        data = {k: v for k, v in data.items() if k != PATHS_SECTION}  # a run's record, e.g. --config RUN/config.toml
    _check_sections(data, str(path))
    return data


def _check_sections(data: dict, origin: str) -> None:
    for key, value in data.items():
        if key not in SECTIONS:
            close = difflib.get_close_matches(key, SECTIONS, n=1)
            hint = f"did you mean [{close[0]}]? " if close else ""
            raise ConfigError(f"{origin}: unknown section [{key}]; {hint}allowed sections: {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise ConfigError(f"{origin}: {key} must be a [{key}] table, got {type(value).__name__}")


def parse_set(assignment: str) -> tuple[str, str, Any]:
    """"algo.learning_rate=3e-4" -> ("algo", "learning_rate", 0.0003). Values are TOML, else plain strings."""
    if "=" not in assignment or "." not in assignment.split("=", 1)[0]:
        raise ConfigError(f"--set expects section.key=value (sections: {', '.join(SECTIONS)}), got {assignment!r}")
    target, raw = assignment.split("=", 1)
    section, key = target.strip().split(".", 1)
    _check_sections({section: {}}, "--set")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key.strip(), value


def merge(base: dict, layer: dict) -> dict:
    """Section-wise update of ``base`` by ``layer`` (new dict)."""
    out = {s: dict(base.get(s, {})) for s in SECTIONS}
    for s in SECTIONS:
        out[s].update(layer.get(s, {}))
    return out


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _coerce(section: str, key: str, value: Any, tp) -> Any:
    """Check ``value`` against the field type ``tp``; ints become floats for float fields, "none" None."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in ("none", "null"))):
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(section, key, value, arg)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]
    ok = True
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    elif origin is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ConfigError(f"{section}.{key} must be {_type_name(tp) if origin is not tuple else 'a list of ints'}, "
                          f"got {value!r}")
    return value


def coerce_section(section: str, cls, values: dict) -> dict:
    """Type-check and convert a section's values against dataclass ``cls`` (unknown keys: ConfigError; settings
    renamed since an older rapidrl are upgraded first, ``rapidrl.train.config.upgrade_legacy``)."""
    values = upgrade_legacy(cls, values)
    hints = typing.get_type_hints(cls)
    check_known_keys(values, [f.name for f in dataclasses.fields(cls)], f"unknown key {section}.{{key}}")
    return {key: _coerce(section, key, value, hints[key]) for key, value in values.items()}


@dataclasses.dataclass
class RunConfig:
    """A resolved run: settings, the algorithm's config dataclass instance, env kwargs."""

    run: RunSettings
    algo_config: Any
    env_kwargs: dict

    @property
    def algo_class(self):
        return get_algorithm(self.run.algo)

    def to_dict(self) -> dict:
        """The resolved config as TOML-ready sections (None stored as "none")."""
        def clean(d):
            return {k: ("none" if v is None else v) for k, v in d.items()}
        return {"run": clean(dataclasses.asdict(self.run)), "algo": clean(config_to_dict(self.algo_config)),
                "env": clean(self.env_kwargs)}

    def write(self, path: str | os.PathLike) -> None:
        Path(path).write_text(tomli_w.dumps(self.to_dict()))


def resolve(layers: list[tuple[str, dict]]) -> RunConfig:
    """Merge ``layers`` [(origin, sections)] over the preset of the final algo/env and validate everything.

    The preset is inserted below all given layers; algo/env come from the merged [run] section.
    """
    merged: dict = {s: {} for s in SECTIONS}
    for origin, layer in layers:
        _check_sections(layer, origin)
        merged = merge(merged, layer)
    algo, env_id = merged["run"].get("algo"), merged["run"].get("env")
    if not algo:
        raise ConfigError("no algorithm given: pass ALGO ENV, or set [run] algo in --config")
    cls = get_algorithm(algo)
    if not env_id:
        raise ConfigError("no environment given: pass ALGO ENV, or set [run] env in --config")
    check_env_id(env_id)
    preset = preset_path(algo, env_id)
    # each layer's settings renamed since an older rapidrl are upgraded before merging, so that a user's old name
    # overrides the preset's new one as it would have before the rename
    upgraded = [read_toml(preset)] if preset.is_file() else []
    upgraded += [{**layer, "algo": upgrade_legacy(cls.config_class, layer["algo"])} if layer.get("algo") else layer
                 for _, layer in layers]
    merged = {s: {} for s in SECTIONS}
    for layer in upgraded:
        merged = merge(merged, layer)
    run = RunSettings(**coerce_section("run", RunSettings, merged["run"]))
    for name in ("timesteps",):
        if getattr(run, name) <= 0:
            raise ConfigError(f"run.{name} must be > 0, got {getattr(run, name)}")
    for name in ("eval_episodes", "checkpoint_every", "checkpoint_keep"):
        if getattr(run, name) < 0:
            raise ConfigError(f"run.{name} must be >= 0, got {getattr(run, name)}")
    if run.seed is not None and run.seed < 0:
        raise ConfigError(f"run.seed must be >= 0 or \"none\", got {run.seed}")
    if run.wandb:
        from rapidrl.train.loggers import wandb_available

        if not wandb_available():
            raise ConfigError("run.wandb = true needs the wandb package (pip install wandb)")
    if run.mlflow:
        import importlib.util

        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError("run.mlflow = true needs MLflow (pip install 'rapidrl[track]')")
    check_env_kwargs(env_id, merged["env"])
    algo_values = coerce_section("algo", cls.config_class, merged["algo"])
    algo_values["seed"] = run.seed
    config = config_from_dict(cls.config_class, algo_values)
    try:
        config.validate()
    except ConfigError as e:
        raise ConfigError(f"algo: {e}") from None
    return RunConfig(run, config, dict(merged["env"]))


def check_env_id(env_id: str) -> None:
    """ConfigError unless ``env_id`` is a built-in, registered or installed env or a registered Gymnasium id
    (``module:EnvId``: after importing ``module``)."""
    import gymnasium as gym

    from rapidrl.envs import list_builtin_envs
    from rapidrl.envs.multiagent.mpe import MPE_ENVS
    from rapidrl.envs.registry import import_env_module

    try:
        env_id = import_env_module(env_id)
    except ValueError as e:
        raise ConfigError(str(e)) from None

    builtin = list_builtin_envs()
    if env_id in builtin or env_id in gym.registry or env_id in MPE_ENVS:
        return
    if env_family(env_id) == "atari":  # ale-py registers its ids on import
        from rapidrl.envs.engines.atari import is_atari_id

        if is_atari_id(env_id):
            try:
                import ale_py

                gym.register_envs(ale_py)
            except ImportError:
                raise ConfigError(f"{env_id!r} needs the Atari extra: pip install 'rapidrl[atari]'") from None
            if env_id in gym.registry:
                return
    close = difflib.get_close_matches(env_id, [*builtin, *gym.registry], n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(f"unknown env {env_id!r}; {hint}built-in envs: {', '.join(builtin)} (or any Gymnasium id; "
                      "an env of your own: 'module:EnvId', or --import MODULE)")


def check_env_kwargs(env_id: str, env_kwargs: dict) -> None:
    """Build one env with ``env_kwargs`` so that bad keys or values fail before a run directory exists (its Dict or
    Tuple observations flattened, as the algorithms build it)."""
    from rapidrl.envs import make_vec

    try:
        make_vec(env_id, 1, seed=0, flatten_observations=True, **env_kwargs).close()
    except (ValueError, TypeError) as e:
        raise ConfigError(f"env: {str(e).splitlines()[0]}") from None


def load_run_config(run_dir: str | os.PathLike) -> RunConfig:
    """The resolved config.toml of a run directory (no preset layering: it is already resolved)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no {CONFIG_FILE})")
    return load_run_config_file(path)


def load_run_config_file(path: str | os.PathLike) -> RunConfig:
    """A resolved config file (as written by ``RunConfig.write``)."""
    data = read_toml(path, run_file=True)
    run = RunSettings(**coerce_section("run", RunSettings, data.get("run", {})))
    cls = get_algorithm(run.algo).config_class
    return RunConfig(run, config_from_dict(cls, coerce_section("algo", cls, data.get("algo", {}))),
                     dict(data.get("env", {})))


def write_paths(run_dir: str | os.PathLike, paths: dict) -> None:
    """Add (or replace) the [paths] section of the run's config.toml: ``{setting: PathChoice}`` of the model
    (``Algorithm.paths``) as ``[paths.<setting>] value, reason``. The other sections are kept as they are."""
    path = Path(run_dir) / CONFIG_FILE
    data = read_toml(path, run_file=True) if path.is_file() else {}
    data[PATHS_SECTION] = {name: choice.as_dict() for name, choice in paths.items()}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(tomli_w.dumps(data))
    os.replace(tmp, path)


def new_run_dir(runs_root: str | os.PathLike, algo: str, env_id: str, run_dir: str | os.PathLike | None = None,
                *, hold: contextlib.ExitStack | None = None, suffix: str = "") -> Path:
    """Create ``runs_root/<algo>-<env>-<timestamp>[-n]<suffix>`` (or exactly ``run_dir``, which must not hold a run).

    A generated name is claimed by ``mkdir`` itself (it fails if the name exists; the next ``-n`` is tried), so two
    processes never get the same directory. hold: an ExitStack that takes the directory's writer lock
    (``rapidrl.runs.lock.RunLock``) before ``run_dir`` is checked for a run, so that no other writer can claim it
    between the check and the caller's config.toml; the lock is held until the stack closes.
    """
    if run_dir is not None:
        path = Path(run_dir)
        path.mkdir(parents=True, exist_ok=True)
        if hold is not None:
            hold.enter_context(RunLock(path))
        if (path / CONFIG_FILE).exists():
            raise ConfigError(f"{path} already holds a run; continue it with: rapidrl train --resume {path}")
        return path
    root = Path(runs_root)
    root.mkdir(parents=True, exist_ok=True)
    base = f"{algo}-{env_id.replace('/', '_').replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 10_000):
        path = root / ((base if n == 1 else f"{base}-{n}") + suffix)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        if hold is not None:
            hold.enter_context(RunLock(path))
        return path
    raise ConfigError(f"could not create a run directory under {root}")


def find_runs(runs_root: str | os.PathLike) -> list[Path]:
    """Run directories under ``runs_root``, oldest first (by the time their config.toml was written)."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if (p / CONFIG_FILE).is_file()]
    return sorted(runs, key=lambda p: (p / CONFIG_FILE).stat().st_mtime)


def latest_run(runs_root: str | os.PathLike) -> Path:
    runs = find_runs(runs_root)
    if not runs:
        raise ConfigError(f"no runs under {runs_root}/ (start one with: rapidrl train ppo CartPole-v1)")
    return runs[-1]

"""Hyperparameter tuning with Optuna: ``rapidrl tune ppo CartPole-v1 --trials 50 --jobs 2 --storage sqlite:///t.db``.

A *study* lives in an Optuna RDB storage (sqlite on one machine; any SQLAlchemy URL, e.g. PostgreSQL, shared
by machines), so several ``rapidrl tune`` processes (``--jobs``, or the same command started on other
machines) work on one study, and a killed study resumes when the command is run again (trials of a dead
process are failed by Optuna's heartbeat). Each trial:

1. samples the algorithm's hyperparameters from the search space (TPE), a TOML file of
   ``[params.<field>]`` tables (``rapidrl/configs/spaces/<algo>.toml`` by default, ``--space FILE``);
2. trains in its own run directory ``<study dir>/trial-<n>/`` (config.toml, summary.json) with an evaluation
   every ``eval_every`` steps, each reported to the pruner (median or successive halving), which stops
   unpromising trials early;
3. is scored by its last evaluation. A trial that diverges (non-finite loss) or crashes is recorded as
   failed, with the reason, and the study goes on.

The best trial is written as a preset, ``<study dir>/best.toml``, which ``rapidrl train --config`` reads.
``optuna-dashboard STORAGE`` opens the study in a browser.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import tomli_w

from rapidrl.runs.config import PRESETS_DIR, resolve
from rapidrl.train.config import ConfigError

SPACES_DIR = PRESETS_DIR / "spaces"
KINDS = ("float", "int", "categorical")


def load_space(algo: str, path: str | os.PathLike | None = None) -> dict[str, dict]:
    """The search space ``{field: spec}`` of ``algo`` (checked: known fields, kinds, bounds)."""
    from rapidrl.algos.registry import get_algorithm

    config_class = get_algorithm(algo).config_class
    path = Path(path) if path is not None else SPACES_DIR / f"{algo}.toml"
    if not path.is_file():
        raise ConfigError(f"no search space for {algo}: {path} does not exist (pass --space FILE)")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            params = tomllib.load(f).get("params")
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from None
    if not isinstance(params, dict) or not params:
        raise ConfigError(f"{path}: needs [params.<field>] tables")
    fields = {f.name for f in dataclasses.fields(config_class)}
    for name, spec in params.items():
        where = f"{path}: params.{name}"
        if name not in fields:
            raise ConfigError(f"{where}: {algo} has no setting {name!r}")
        kind = spec.get("type")
        if kind not in KINDS:
            raise ConfigError(f"{where}: type must be one of {KINDS}, got {kind!r}")
        if kind == "categorical":
            if not isinstance(spec.get("choices"), list) or not spec["choices"]:
                raise ConfigError(f"{where}: categorical needs a non-empty choices list")
        else:
            low, high = spec.get("low"), spec.get("high")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or low >= high:
                raise ConfigError(f"{where}: needs numbers low < high, got low={low!r} high={high!r}")
            if spec.get("log") and low <= 0:
                raise ConfigError(f"{where}: a log scale needs low > 0")
    return params


def sample_params(trial, space: dict[str, dict]) -> dict:
    """One draw of every parameter of ``space`` from an Optuna trial."""
    out = {}
    for name, spec in space.items():
        if spec["type"] == "float":
            out[name] = trial.suggest_float(name, spec["low"], spec["high"], log=bool(spec.get("log", False)))
        elif spec["type"] == "int":
            out[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]), log=bool(spec.get("log", False)))
        else:
            choice = trial.suggest_categorical(name, [json.dumps(c) for c in spec["choices"]])
            out[name] = json.loads(choice)  # lists (hidden sizes) travel as JSON strings through the storage
    return out


def _pruner(name: str, optuna):
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"--pruner must be median, halving or none, got {name!r}")


def _objective(algo: str, env: str, timesteps: int, space: dict, study_dir: Path, eval_every: int,
               eval_episodes: int, seed: int, optuna):
    from rapidrl.train.algorithm import NonFiniteError
    from rapidrl.train.callbacks import EvalCallback

    class PruningEval(EvalCallback):
        """Evaluate, report to the trial, stop the trial when the pruner says so."""

        def __init__(self, trial):
            super().__init__(eval_freq=eval_every, n_episodes=eval_episodes)
            self.trial = trial

        def on_update_end(self, algo_) -> bool:
            before = len(self.history)
            super().on_update_end(algo_)
            if len(self.history) > before:
                step, mean = self.history[-1][0], self.history[-1][1]
                self.trial.report(mean, step)
                if self.trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at step {step} (eval {mean:.2f})")
            return True

    def objective(trial) -> float:
        params = sample_params(trial, space)
        run_dir = study_dir / f"trial-{trial.number}"
        run_dir.mkdir(parents=True, exist_ok=True)
        config = resolve([("trial", {"run": {"algo": algo, "env": env, "timesteps": timesteps, "seed": seed},
                                     "algo": params})])
        config.write(run_dir / "config.toml")
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("pid", os.getpid())
        model = config.algo_class(env, config.algo_config, env_kwargs=config.env_kwargs)
        cb = PruningEval(trial)
        result = {"params": params}
        try:
            model.learn(timesteps, callback=cb, progress_bar=False)
            score = cb.history[-1][1] if cb.history and cb.history[-1][0] >= model.num_timesteps \
                else model.evaluate(eval_episodes)[0]
            result.update(status="finished", score=score)
            return score
        except optuna.TrialPruned:
            result.update(status="pruned", evals=[h[:2] for h in cb.history])
            raise
        except NonFiniteError as e:  # a diverged trial is a failed trial, with the reason kept
            result.update(status="diverged", error=str(e))
            trial.set_user_attr("error", str(e))
            raise
        finally:
            (run_dir / "summary.json").write_text(json.dumps(result, indent=1, default=str))
            model.env.close()

    return objective


def decoded(params: dict) -> dict:
    """Trial parameters as the config takes them (categorical choices are stored as JSON strings)."""
    return {k: json.loads(v) if isinstance(v, str) else v for k, v in params.items()}


def write_best(study, algo: str, env: str, timesteps: int, path: Path) -> Path:
    """The best trial's hyperparameters as a preset TOML for ``rapidrl train --config``."""
    best = study.best_trial
    params = decoded(best.params)
    doc = {"run": {"algo": algo, "env": env, "timesteps": timesteps}, "algo": params}
    header = (f"# Best trial {best.number} of study {study.study_name!r}: score {best.value:.4g}\n"
              f"# written by rapidrl tune; train it with: rapidrl train --config {path}\n")
    path.write_text(header + tomli_w.dumps(doc))
    return path


def run_study(algo: str, env: str, *, trials: int, storage: str, study_name: str | None = None,
              timesteps: int = 50_000, jobs: int = 1, pruner: str = "median", space_path=None,
              eval_every: int | None = None, eval_episodes: int = 5, seed: int = 0, out_dir=None,
              worker: bool = False) -> dict:
    """Run (or join, or resume) a study until it holds ``trials`` finished, pruned or failed trials.

    With ``jobs > 1`` this process starts ``jobs - 1`` worker processes on the same storage and works too.
    Returns {"study", "best_value", "best_params", "best_preset", "states"}.
    """
    import warnings

    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the heartbeat

    if trials < 1 or jobs < 1 or timesteps < 1 or eval_episodes < 1:
        raise ConfigError("--trials, --jobs, --timesteps and --eval-episodes must be >= 1")
    space = load_space(algo, space_path)
    resolve([("check", {"run": {"algo": algo, "env": env}})])  # unknown env ids fail before any trial
    study_name = study_name or f"{algo}-{env}"
    study_dir = Path(out_dir) if out_dir else Path("tune") / study_name.replace("/", "_")
    study_dir.mkdir(parents=True, exist_ok=True)
    eval_every = eval_every or max(1, timesteps // 5)
    rdb = optuna.storages.RDBStorage(storage, heartbeat_interval=5, grace_period=30) \
        if not storage.startswith("sqlite") else optuna.storages.RDBStorage(
            storage, heartbeat_interval=5, grace_period=30, engine_kwargs={"connect_args": {"timeout": 60}})
    study = optuna.create_study(study_name=study_name, storage=rdb, direction="maximize", load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(seed=seed + os.getpid() % 1000 if worker else seed,
                                                                   n_startup_trials=3),
                                pruner=_pruner(pruner, optuna))
    children = []
    if jobs > 1 and not worker:
        argv = [sys.executable, "-m", "rapidrl", "tune", algo, env, "--trials", str(trials), "--storage", storage,
                "--study", study_name, "--timesteps", str(timesteps), "--pruner", pruner, "--eval-every",
                str(eval_every), "--eval-episodes", str(eval_episodes), "--seed", str(seed), "--out",
                str(study_dir), "--worker"] + (["--space", str(space_path)] if space_path else [])
        children = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(study_dir / f"worker-{k}.log", "w"))
                    for k in range(1, jobs)]
    done_states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    objective = _objective(algo, env, timesteps, space, study_dir, eval_every, eval_episodes, seed, optuna)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, callbacks=[MaxTrialsCallback(trials, states=done_states)], catch=(Exception,))
    for child in children:
        child.wait()
    states = {s.name.lower(): sum(t.state == s for t in study.get_trials(deepcopy=False)) for s in done_states}
    out = {"study": study_name, "states": states, "dir": str(study_dir)}
    if states["complete"]:
        out.update(best_value=study.best_value, best_params=decoded(study.best_params),
                   best_preset=str(write_best(study, algo, env, timesteps, study_dir / "best.toml")))
    return out


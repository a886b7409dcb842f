"""Training a run directory (``rapidrl train``; ``run_training`` is its core): check that its config builds, build or
resume its model, train with loggers, the monitor feed and checkpoints, then save, evaluate and summarize; or train it
in a background process (``train_in_background``).

The main process holds the run's writer lock throughout (``rapidrl.runs.lock``); a user's mistake raises
``rapidrl.runs.errors.RunError`` or ``ConfigError``, one line each.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

from rapidrl.runs.config import load_run_config, write_paths
from rapidrl.runs.errors import RunError, os_error_line
from rapidrl.runs.layout import (
    CHECKPOINT_DIR,
    METRICS_CSV,
    MODEL_FILE,
    MONITOR_FILE,
    TRAIN_LOG,
    remove_stale_temp,
    write_summary,
)
from rapidrl.runs.lock import RunLock
from rapidrl.train.config import ConfigError, config_to_dict
from rapidrl.train.paths import describe

__all__ = ["build_model", "check_buildable", "run_training", "train_in_background"]


def train_in_background(run_dir: Path, show_monitor: bool) -> int:
    """Start ``rapidrl train --resume RUN_DIR --headless`` as a detached child logging to train.log."""
    log = open(run_dir / TRAIN_LOG, "a")
    child = subprocess.Popen([sys.executable, "-m", "rapidrl", "train", "--resume", str(run_dir), "--headless"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    if not show_monitor:
        print(f"training in the background (pid {child.pid}), log: {run_dir / TRAIN_LOG}\n"
              f"attach a monitor:  rapidrl monitor {run_dir}\n"
              f"stop it:           kill {child.pid}   (continue later: rapidrl train --resume {run_dir})")
        return 0
    from rapidrl.monitor.view import DETACHED, run_monitor

    if run_monitor([run_dir], stop_when=lambda: child.poll() is not None) == DETACHED:
        print(f"training continues in the background (pid {child.pid}); log: {run_dir / TRAIN_LOG}")
        return 0
    child.wait()  # the run has ended; the trainer is saving and evaluating
    tail = (run_dir / TRAIN_LOG).read_text().strip().splitlines()[-4:]
    print("\n".join(tail))
    return child.returncode


def check_buildable(config) -> None:
    """Build (and drop) the model once, so that an env/algorithm mismatch, or a run shorter than the algorithm's
    warm-up (``rapidrl.train.warmup``), fails before a run directory exists."""
    from rapidrl.train.warmup import short_run

    try:
        model = config.algo_class(config.run.env, config.algo_config, env_kwargs=config.env_kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{config.run.algo} on {config.run.env}: {str(e).splitlines()[0]}") from None
    model.env.close()
    short = short_run(model, config.run.timesteps)
    if short is not None:
        message, trains_nothing = short
        if trains_nothing:
            raise ConfigError(f"{config.run.algo} on {config.run.env}: {message}")
        print(f"warning: {message}", file=sys.stderr)


def build_model(config, run_dir: Path, resume: bool = False):
    """A fresh model, or that of the newest checkpoint that loads (returns model, resumed). A checkpoint that does
    not load (corrupt, foreign) is skipped, saying so; resume: the user asked to resume (a run without checkpoints
    is then said to start from step 0)."""
    from rapidrl.train.checkpoint import ModelFileError, buffer_dir, resume_candidates

    cls, run = config.algo_class, config.run
    with_buffer = cls.has_replay_buffer
    candidates = resume_candidates(run_dir / CHECKPOINT_DIR, cls)
    skipped = []
    try:
        if not candidates:
            if resume:
                print(f"{run_dir} has no checkpoint yet: training starts from step 0", file=sys.stderr)
            return cls(run.env, config.algo_config, env_kwargs=config.env_kwargs), False
        env = None
        if config.env_kwargs:
            from rapidrl.envs import make_vec

            env = make_vec(run.env, config.algo_config.num_envs, seed=run.seed, **config.env_kwargs)
        settings = config_to_dict(config.algo_config)  # config.toml is authoritative (edit it before resuming)
        for _, ckpt in candidates:
            extra = {"include_buffer": True} if with_buffer and buffer_dir(ckpt).is_dir() else {}
            try:
                model = cls.load(ckpt, env=env, **extra, **settings)
            except ModelFileError as e:
                skipped.append(str(e))
                print(f"warning: skipped {ckpt.name}: {e}", file=sys.stderr)
                continue
            except (ValueError, OSError, KeyError, EOFError) as e:
                if not extra:
                    raise
                # the model loads (else ModelFileError); its replay buffer's files do not (a disk error, a partial copy)
                reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
                print(f"warning: the replay buffer saved with {ckpt.name} does not load ({reason}); resuming with an "
                      "empty one", file=sys.stderr)
                model = cls.load(ckpt, env=env, **settings)
            else:
                if with_buffer and not extra:
                    print(f"warning: {ckpt} has no saved replay buffer; resuming with an empty one", file=sys.stderr)
            model.env_kwargs = dict(config.env_kwargs)
            print(f"resuming from {ckpt} (step {model.num_timesteps:,})"
                  + (f", the newest that loads ({len(skipped)} newer skipped)" if skipped else ""))
            return model, True
    except (ValueError, TypeError, RuntimeError) as e:  # bad env kwargs, or a checkpoint config.toml cannot fit
        raise ConfigError(str(e).splitlines()[0]) from None
    raise RunError(f"cannot resume {run_dir}: none of its {len(skipped)} checkpoints loads ({'; '.join(skipped)}); "
                   f"move {run_dir / CHECKPOINT_DIR} away to train it again from step 0")


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """While the block runs, ``kill PID`` (SIGTERM) stops at once as Ctrl-C does (``KeyboardInterrupt``): the
    handling of a distributed rank, which cannot stop at an update of its own (``StopOnSignal`` is the other's)."""
    from rapidrl.train.callbacks import signal_handlers

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    with signal_handlers({signal.SIGTERM: interrupt}):
        yield


def run_training(run_dir: Path, progress: bool = True, prebuilt=None, main: bool = True, resume: bool = False
                 ) -> int:
    """Train the run in ``run_dir`` (fresh or from its newest checkpoint that loads), evaluate, save, summarize.

    The main process holds the run's writer lock throughout (``rapidrl.runs.lock``: a second writer is refused) and
    first removes the temporary files of writes a killed process left (``remove_stale_temp``).
    prebuilt: (config, model) already built (distributed learners); main: False on ranks other than 0, which
    train without logging, checkpointing, saving or evaluating. resume: the user asked to resume (said when there is
    no checkpoint to resume from).
    """
    with RunLock(run_dir, "rapidrl train") if main else contextlib.nullcontext():
        if main:
            stale = remove_stale_temp(run_dir)
            if stale:
                print(f"removed {len(stale)} temporary file(s) of unfinished writes: "
                      f"{', '.join(p.name for p in stale)}", file=sys.stderr)
        try:
            return _run_training(run_dir, progress, prebuilt, main, resume)
        except OSError as e:  # a full disk, a read-only or forbidden directory: what failed, and what was kept
            raise RunError(os_error_line(e, run_dir)) from e


def _run_training(run_dir: Path, progress: bool, prebuilt, main: bool, resume: bool) -> int:
    from rapidrl.monitor.publisher import MonitorPublisher
    from rapidrl.train.algorithm import NonFiniteError
    from rapidrl.train.callbacks import StopOnSignal
    from rapidrl.train.checkpoint import Checkpointer
    from rapidrl.train.loggers import CSVLogger, MLflowLogger, TensorBoardLogger, TextLogger, WandbLogger

    if prebuilt is None:
        config = load_run_config(run_dir)
        model, resumed = build_model(config, run_dir, resume)
    else:
        (config, model), resumed = prebuilt, False
    run = config.run
    if resumed and model.num_timesteps >= run.timesteps:
        print(f"{run_dir} already trained {model.num_timesteps:,} of {run.timesteps:,} steps: nothing to do")
        return 0
    start_step = model.num_timesteps if resumed else None
    steps, continue_call = run.timesteps, resumed
    schedule = model.learn_schedule if resumed else None
    if schedule is not None and sum(schedule) != run.timesteps:  # config.toml's run.timesteps edited since
        steps, continue_call = run.timesteps - model.num_timesteps, False
        print(f"warning: run.timesteps is {run.timesteps:,} in config.toml, the checkpoint's run was started for "
              f"{sum(schedule):,}: training goes on for the {steps:,} steps left as a new learn call (its schedules, "
              "such as the learning rate's, start again over them)", file=sys.stderr)
    publisher, loggers = None, []
    if main:
        publisher = MonitorPublisher(model, run_dir / MONITOR_FILE, run_name=run_dir.name, total_steps=run.timesteps)
        loggers = [CSVLogger(run_dir / METRICS_CSV, resume_step=start_step),
                   TensorBoardLogger(run_dir, resume_step=start_step), publisher]
        if run.wandb:
            loggers.append(WandbLogger(run_dir, run_dir.name, config.to_dict(), resume=resumed))
        if run.mlflow:
            loggers.append(MLflowLogger(run_dir, run_dir.name, config.to_dict(), resume=resumed))
        if not progress:
            loggers.append(TextLogger(run.timesteps))
    model.loggers.extend(loggers)
    if main:  # which implementation runs, and why (rapidrl.train.paths): on screen, in config.toml and summary.json
        print("paths: " + describe(model.paths))
        write_paths(run_dir, model.paths)
    every = run.checkpoint_every or max(1, run.timesteps // 10)
    checkpointer = Checkpointer(run_dir / CHECKPOINT_DIR, every=every, keep=run.checkpoint_keep)
    # Ctrl-C / `kill PID`: stop after the update in progress and checkpoint there (the checkpointer's end of
    # training), so that a resume loses nothing. Distributed ranks must stop at the same update: they stop at once.
    stop = StopOnSignal() if model.dist is None else None
    callbacks = [c for c in (checkpointer if main else None, stop) if c is not None]
    t0 = time.perf_counter()
    status, code = "finished", 0
    try:
        with stop.installed() if stop is not None else sigterm_as_ctrl_c():
            model.learn(steps, callback=callbacks or None, progress_bar=progress, resume=continue_call)
        if stop is not None and stop.requested and model.num_timesteps < run.timesteps:
            status, code = "stopped", 130
            print(f"stopped at step {model.num_timesteps:,} ({stop.requested}); checkpoint: "
                  f"{checkpointer.last_good or 'none'}\ncontinue with: rapidrl train --resume {run_dir}",
                  file=sys.stderr)
    except NonFiniteError as e:
        status, code = "failed", 1
        good = checkpointer.last_good
        print(f"rapidrl: error: {e}. Last good checkpoint: {good or 'none'}; lower the learning rate "
              f"(rapidrl train ... --set algo.learning_rate=...) or resume it with: rapidrl train --resume {run_dir}",
              file=sys.stderr)
    except KeyboardInterrupt:
        status, code = "stopped", 130
        print(f"\ninterrupted at step {model.num_timesteps:,}; last checkpoint: {checkpointer.last_good or 'none'}\n"
              f"continue with: rapidrl train --resume {run_dir}", file=sys.stderr)
    finally:
        wall = time.perf_counter() - t0
        train_time = model.timer.elapsed()  # the learn call's clock: a resumed run's earlier parts included
        for logger in loggers:
            if logger is not publisher:
                logger.close()
    if not main:
        return code
    summary = {"status": status, "algo": run.algo, "env": run.env, "timesteps": model.num_timesteps,
               "total_timesteps": run.timesteps, "episodes": model.num_episodes, "wall_time_s": round(wall, 3),
               "train_time_s": round(train_time, 3),
               "sps": round((model.num_timesteps - (start_step or 0)) / max(wall, 1e-9), 1), "resumed": resumed,
               "last_checkpoint": str(checkpointer.last_good) if checkpointer.last_good else None,
               "paths": {name: p.as_dict() for name, p in model.paths.items()}}
    if status == "finished":
        model_path = model.save(run_dir / MODEL_FILE)
        summary["model"] = str(model_path)
        if run.eval_episodes > 0:
            print(f"evaluating {run.eval_episodes} episodes ({run.eval_episodes} envs in parallel)", flush=True)
            mean, std = model.evaluate(run.eval_episodes, progress=progress)
            summary.update(eval_mean=mean, eval_std=std, eval_episodes=run.eval_episodes)
            print(f"eval return: {mean:.2f} ± {std:.2f} over {run.eval_episodes} episodes")
            dataset = getattr(model, "dataset", None)  # an offline model: D4RL's score with its dataset's references
            if dataset is not None and dataset.ref_min_score is not None and dataset.ref_max_score is not None:
                summary["eval_score"] = float(dataset.normalized_score(mean))
                print(f"normalised score: {summary['eval_score']:.1f} (0: {dataset.ref_min_score:.1f}, random; "
                      f"100: {dataset.ref_max_score:.1f}, expert; {dataset.dataset_id})")
        if resumed and continue_call:  # this process trained the part after the checkpoint; the whole's clock too
            print(f"trained steps {start_step:,} to {model.num_timesteps:,} in {wall:.1f} s ({summary['sps']:,.0f} "
                  f"SPS); all {model.num_timesteps:,} steps in {train_time:.1f} s of training")
        elif resumed:  # a new learn call after the checkpoint (run.timesteps edited): its own clock only
            print(f"trained steps {start_step:,} to {model.num_timesteps:,} in {wall:.1f} s ({summary['sps']:,.0f} "
                  "SPS)")
        else:
            print(f"trained {model.num_timesteps:,} steps in {wall:.1f} s ({summary['sps']:,.0f} SPS)")
        print(f"model saved to {model_path}")
    write_summary(run_dir, summary)
    publisher.close(status)
    return code

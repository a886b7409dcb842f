"""The ``rapidrl`` command: train, eval, monitor, list, plot, tune, export, precompile, bench.

    rapidrl train ppo CartPole-v1 --timesteps 100000 --seed 0
    rapidrl train ppo mypkg.envs:MyEnv-v0      # imports mypkg.envs (it registers MyEnv-v0), as gymnasium.make does
    rapidrl train --config my.toml --set algo.learning_rate=1e-3
    rapidrl train --resume runs/ppo-CartPole-v1-20261121-120000
    rapidrl eval runs/<run> --episodes 10 --video play.gif
    rapidrl monitor --latest
    rapidrl list presets
    rapidrl plot runs/a runs/b --out curves.png
    rapidrl tune ppo CartPole-v1 --trials 50 --jobs 2 --storage sqlite:///t.db
    rapidrl export runs/<run> --format onnx
    rapidrl collect runs/<run> --steps 100000 --noise 0.1 --dataset-id rapidrl/hopper/medium-v0
    rapidrl precompile

Every expected failure (bad keys, values and files; OS errors such as a full disk, a read-only directory or a
missing permission; a corrupt model file; an env module that fails to import; a run another process is writing) ends
with one line ``rapidrl: error: ...`` and exit code 2 (``--debug`` or ``RAPIDRL_DEBUG=1``: the traceback instead).
Called from Python, the same failures raise exceptions whose message is that line (without ``rapidrl: error:``).

One writer per run: ``train`` (new runs and ``--resume``) and ``collect`` hold the run directory's lock
(``rapidrl.runs.lock``) while they run; ``monitor``, ``eval``, ``plot`` and ``export`` read without it.

Like ``python -m rapidrl``, the ``rapidrl`` command imports your modules (``--import MODULE``, ``MODULE:EnvId``)
from the current directory first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from rapidrl.runs.collect import collect_dataset, load_run_model, run_dir_of
from rapidrl.runs.config import (
    find_runs,
    latest_run,
    list_presets,
    load_run_config,
    new_run_dir,
    parse_set,
    preset_path,
    read_toml,
    resolve,
)
from rapidrl.runs.errors import RunError, os_error_line
from rapidrl.runs.layout import CONFIG_FILE
from rapidrl.runs.lock import RunInUseError, RunLock
from rapidrl.train.config import ConfigError
from rapidrl.training import check_buildable, run_training, train_in_background

CLIError = RunError
"""A user error: printed as one line, exit code 2 (``rapidrl.runs.errors.RunError``)."""




# -- train ----------------------------------------------------------------------------------------------

def _cli_layer(args) -> dict:
    run = {}
    for key, value in (("algo", args.algo), ("env", args.env), ("timesteps", args.timesteps), ("seed", args.seed),
                       ("eval_episodes", args.eval_episodes)):
        if value is not None:
            run[key] = value
    return {"run": run}


def _resolve(args, layers):
    """The run's config from ``layers``; an env that an ``--import`` module registered is recorded as
    ``module:EnvId``, so that resuming, evaluating or loading the run in a new process imports the module again."""
    from rapidrl.envs import registry

    config = resolve(layers)
    env = config.run.env
    qualified = registry.qualified_id(env) if env in registry.registered_envs() else args.imported.get(env, env)
    return config if qualified == env else resolve([*layers, ("--import", {"run": {"env": qualified}})])


def _import_modules(modules: list[str]) -> dict[str, str]:
    """Import the ``--import`` modules (they register envs); env id -> ``module:EnvId`` for the ids they added
    (rapidrl's registry knows the module of an env it registered, already imported or not: ``_resolve``)."""
    if not modules:
        return {}
    import importlib

    import gymnasium as gym

    from rapidrl.envs import registry

    added = {}
    for module in modules:
        before = {*gym.registry, *registry.registered_envs()}
        try:
            importlib.import_module(module)
        except Exception as e:
            raise CLIError(f"--import {module}: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}") from None
        for env_id in {*gym.registry, *registry.registered_envs()} - before:
            qualified = registry.qualified_id(env_id)
            added[env_id] = qualified if ":" in qualified else f"{module}:{env_id}"
    return added


def _set_layer(assignments: list[str]) -> dict:
    layer: dict = {}
    for a in assignments:
        section, key, value = parse_set(a)
        layer.setdefault(section, {})[key] = value
    return layer


def cmd_train(args) -> int:
    if args.seeds is not None:
        return _train_seeds(args)
    if args.distributed:
        return _train_distributed(args)
    with contextlib.ExitStack() as hold:  # the run's writer lock, from its creation to the end of training
        if args.resume:
            if args.algo or args.config or args.set:
                raise CLIError("--resume continues a run with its saved config.toml; do not pass ALGO ENV, --config "
                               "or --set with it")
            run_dir = Path(args.resume)
            load_run_config(run_dir)  # fails early, one line, when it is not a run directory
        else:
            layers = [("--config " + args.config, read_toml(args.config))] if args.config else []
            layers += [("command line", _cli_layer(args)), ("--set", _set_layer(args.set))]
            config = _resolve(args, layers)
            check_buildable(config)
            run_dir = new_run_dir(args.runs_root, config.run.algo, config.run.env, args.run_dir, hold=hold)
            config.write(run_dir / CONFIG_FILE)
            print(f"run directory: {run_dir}")
            preset = preset_path(config.run.algo, config.run.env)
            if preset.is_file():
                print(f"preset: {preset.name} (under your --config, flags and --set)")
            elif not args.config:
                print(f"no preset for {config.run.algo} on {config.run.env}: using the algorithm's defaults "
                      f"(see `rapidrl list presets`; tune them with --set or --config)")
        if args.detach or args.monitor:
            hold.close()  # the background trainer takes the lock itself
            return train_in_background(run_dir, show_monitor=args.monitor)
        return run_training(run_dir, progress=not args.headless, resume=bool(args.resume))


def _train_seeds(args) -> int:
    """``--seeds 0-4``: one run per seed, as parallel processes, in one experiment directory; then its summary."""
    from rapidrl.runs.experiment import parse_seeds, run_seeds, summarize

    if args.resume or args.distributed or args.detach or args.monitor or args.seed is not None:
        raise CLIError("--seeds cannot be combined with --seed, --resume, --distributed, --detach or --monitor")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as e:
        raise CLIError(str(e)) from None
    if args.jobs is not None and args.jobs < 1:
        raise CLIError(f"--jobs must be >= 1, got {args.jobs}")
    layers = [("--config " + args.config, read_toml(args.config))] if args.config else []
    layers += [("command line", _cli_layer(args)), ("--set", _set_layer(args.set))]
    config = _resolve(args, layers)  # fails here, once, rather than in every seed's process
    argv = [a for a in (args.algo, args.env) if a]
    for module in args.imports:
        argv += ["--import", module]
    argv += ["--config", args.config] if args.config else []
    for assignment in args.set:
        argv += ["--set", assignment]
    if args.timesteps is not None:
        argv += ["--timesteps", str(args.timesteps)]
    if args.eval_episodes is not None:
        argv += ["--eval-episodes", str(args.eval_episodes)]
    if args.run_dir:
        exp_dir = Path(args.run_dir)
    else:
        exp_dir = new_run_dir(args.runs_root, config.run.algo, config.run.env, suffix="-seeds")
    print(f"experiment directory: {exp_dir} (seeds {', '.join(map(str, seeds))})")
    codes = run_seeds(exp_dir, seeds, argv, jobs=args.jobs)
    s = summarize(exp_dir)
    if "iqm" in s:
        print(f"final eval per seed: {', '.join(f'{k}: {v:.1f}' for k, v in s['evals'].items())}\n"
              f"IQM {s['iqm']:.1f} (95% CI {s['iqm_ci'][0]:.1f} to {s['iqm_ci'][1]:.1f}), "
              f"mean {s['mean']:.1f} (95% CI {s['mean_ci'][0]:.1f} to {s['mean_ci'][1]:.1f})\n"
              f"curves: rapidrl plot {exp_dir}")
    failed = [k for k, c in codes.items() if c != 0]
    if failed:
        print(f"rapidrl: error: seeds {failed} failed; see {exp_dir}/seed-K.log", file=sys.stderr)
        return 1
    return 0


def _train_distributed(args) -> int:
    """One learner per process under torchrun: every rank resolves the same config from the same arguments;
    rank 0 alone creates the run directory, logs, checkpoints, saves and evaluates."""
    if args.resume or args.detach or args.monitor:
        raise CLIError("--distributed cannot be combined with --resume, --detach or --monitor")
    if not args.run_dir:
        raise CLIError("--distributed needs --run-dir DIR so that every rank agrees on the run directory")
    layers = [("--config " + args.config, read_toml(args.config))] if args.config else []
    layers += [("command line", _cli_layer(args)), ("--set", _set_layer(args.set))]
    config = _resolve(args, layers)
    try:
        model = config.algo_class(config.run.env, config.algo_config, env_kwargs=config.env_kwargs, distributed=True)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ConfigError(f"{config.run.algo} on {config.run.env}: {str(e).splitlines()[0]}") from None
    main = model.dist.is_main
    run_dir = Path(args.run_dir)
    with contextlib.ExitStack() as hold:
        if main:
            run_dir = new_run_dir(args.runs_root, config.run.algo, config.run.env, args.run_dir, hold=hold)
            config.write(run_dir / CONFIG_FILE)
            print(f"run directory: {run_dir} ({model.dist.world_size} learners)")
        model.dist.barrier()
        try:
            return run_training(run_dir, progress=main and not args.headless, prebuilt=(config, model), main=main)
        finally:
            model.dist.close()














# -- eval -----------------------------------------------------------------------------------------------



def cmd_eval(args) -> int:
    from rapidrl.monitor.video import check_video_path, record

    if args.episodes <= 0:
        raise CLIError(f"--episodes must be > 0, got {args.episodes}")
    video = Path(args.video) if args.video else None
    if video is not None:
        try:
            check_video_path(video)
        except ValueError as e:
            raise CLIError(str(e)) from None
    model, path, seed = load_run_model(Path(args.run))
    from rich.console import Console

    mean, std = model.evaluate(args.episodes, deterministic=not args.stochastic, progress=Console().is_terminal)
    kind = "sampled actions" if args.stochastic else "deterministic"
    print(f"{path}: eval return {mean:.2f} ± {std:.2f} over {args.episodes} episodes ({kind})")
    if video is not None:
        out, returns = record(model, model.env_id, video, seed=seed, env_kwargs=model.env_kwargs)
        print(f"video of {len(returns)} episode(s) (return {', '.join(f'{r:.1f}' for r in returns) or '-'}): {out}")
    return 0


# -- collect --------------------------------------------------------------------------------------------

def cmd_collect(args) -> int:
    """Write a Minari dataset from a trained policy (or, --from-replay, from the run's replay buffer), holding the
    run's writer lock (a trainer cannot replace its checkpoints and buffers under it)."""
    if args.steps is not None and args.steps <= 0:
        raise CLIError(f"--steps must be > 0, got {args.steps}")
    if args.noise < 0 or not 0 <= args.epsilon <= 1 or args.ref_episodes <= 0 or args.num_envs <= 0:
        raise CLIError("--noise must be >= 0, --epsilon in [0, 1], --ref-episodes and --num-envs > 0")
    if args.from_replay == (args.steps is not None):
        raise CLIError("give --steps N (collect with the policy) or --from-replay (the run's replay buffer)")
    target = Path(args.run)
    run_dir = run_dir_of(target)
    with RunLock(run_dir, "rapidrl collect") if run_dir is not None else contextlib.nullcontext():
        collect_dataset(target, steps=args.steps, from_replay=args.from_replay, stochastic=args.stochastic,
                        noise=args.noise, epsilon=args.epsilon, num_envs=args.num_envs, seed=args.seed,
                        dataset_id=args.dataset_id, ref_episodes=args.ref_episodes, ref_min=args.ref_min,
                        ref_max=args.ref_max, expert=args.expert, root=args.root)
    return 0






# -- monitor, list, plot, bench -------------------------------------------------------------------------

def cmd_monitor(args) -> int:
    from rich.console import Console

    from rapidrl.monitor.view import run_monitor, runs_table

    if args.list:
        Console().print(runs_table(find_runs(args.runs_root)))
        return 0
    runs = [Path(r) for r in args.runs] if args.runs else []
    if args.latest or not runs:
        runs.append(latest_run(args.runs_root))
    for r in runs:
        if not (r / CONFIG_FILE).is_file():
            raise CLIError(f"{r} is not a run directory (no {CONFIG_FILE})")
    run_monitor(runs, refresh_hz=args.refresh, once=args.once)
    return 0


def cmd_list(args) -> int:
    what = [args.what] if args.what else ["algos", "envs", "presets"]
    if "algos" in what:
        from rapidrl.algos.registry import algorithms

        print("algorithms:")
        for name, cls in algorithms().items():
            print(f"  {name:6s} {(cls.__doc__ or '').strip().splitlines()[0]}")
    if "envs" in what:
        from rapidrl.envs import list_envs

        print("envs by family (any Gymnasium id works too; yours: 'module:EnvId', --import MODULE or an installed "
              "package's rapidrl.envs entry point):")
        for family, ids in list_envs().items():
            print(f"  {family}:")
            for env_id in ids:
                print(f"    {env_id}")
    if "presets" in what:
        print("presets (rapidrl/configs/, applied automatically for their algo and env):")
        for p in list_presets():
            run = read_toml(p).get("run", {})
            print(f"  {p.stem:16s} {run.get('algo', '?')} {run.get('env', '?')}, {run.get('timesteps', '?'):,} steps")
    return 0


def cmd_plot(args) -> int:
    from rapidrl.monitor.plot import plot_runs
    from rapidrl.runs.experiment import is_experiment, plot_experiment

    runs = [Path(r) for r in args.runs]
    if len(runs) == 1 and is_experiment(runs[0]):
        out = Path(args.out) if args.out else runs[0] / "curves.png"
        try:
            path, s = plot_experiment(runs[0], out)
        except ValueError as e:
            raise CLIError(str(e)) from None
        print(f"learning curves (mean of seeds, bootstrap 95% band): {path}")
        if "iqm" in s:
            print(f"final eval IQM {s['iqm']:.2f} (95% CI {s['iqm_ci'][0]:.2f} to {s['iqm_ci'][1]:.2f}) over "
                  f"{len(s['evals'])} seeds; mean {s['mean']:.2f}")
        return 0
    out = Path(args.out) if args.out else runs[0] / "curves.png"
    try:
        print(f"learning curves: {plot_runs(runs, out)}")
    except ValueError as e:
        raise CLIError(str(e)) from None
    return 0


def cmd_export(args) -> int:
    from rapidrl.export import FORMATS, DeterministicPolicy, write_policy

    if args.format not in FORMATS:
        raise CLIError(f"--format must be one of {', '.join(FORMATS)}, got {args.format!r}")
    model, path, _ = load_run_model(Path(args.run))
    default = Path(args.run) / ("policy.onnx" if args.format == "onnx" else "policy.ts")
    out = Path(args.out) if args.out else (default if Path(args.run).is_dir() else path.with_suffix(default.suffix))
    try:
        policy = DeterministicPolicy(model)
        written = write_policy(policy, tuple(model.observation_space.shape), out, args.format)
    except (ValueError, ImportError) as e:
        raise CLIError(str(e)) from None
    shape = "x".join(str(d) for d in model.observation_space.shape)
    inputs, outputs = f"obs: [B, {shape}] float32, raw observations", "env actions"
    size = policy.state_size
    if size is not None:
        inputs += f"; state: [B, {size}] float32, zeros for fresh episodes; episode_start: [B] bool"
        outputs += f", state_out [B, {size}] (the next step's state)"
    if getattr(model, "action_mask_size", 0):
        inputs += f"; action_masks: [B, {model.action_mask_size}] bool"
    print(f"exported the deterministic {model.name} policy of {path} to {written} (inputs {inputs}; outputs "
          f"{outputs})")
    return 0


def cmd_tune(args) -> int:
    from rapidrl.tune import run_study

    try:
        import optuna  # noqa: F401
    except ImportError:
        raise CLIError("rapidrl tune needs Optuna: pip install 'rapidrl[tune]'") from None
    if not args.worker:
        print(f"study {args.study or f'{args.algo}-{args.env}'} in {args.storage}: {args.trials} trials, "
              f"{args.jobs} process(es); open it with: optuna-dashboard {args.storage}", flush=True)
    result = run_study(args.algo, args.env, trials=args.trials, storage=args.storage, study_name=args.study,
                       timesteps=args.timesteps, jobs=args.jobs, pruner=args.pruner, space_path=args.space,
                       eval_every=args.eval_every, eval_episodes=args.eval_episodes, seed=args.seed,
                       out_dir=args.out, worker=args.worker)
    if args.worker:
        return 0
    st = result["states"]
    print(f"trials: {st['complete']} complete, {st['pruned']} pruned, {st['fail']} failed (run dirs in "
          f"{result['dir']})")
    if "best_preset" in result:
        print(f"best: {result['best_value']:.2f} with {result['best_params']}\n"
              f"preset: {result['best_preset']}  (rapidrl train --config {result['best_preset']})")
        return 0
    print("rapidrl: error: no trial completed", file=sys.stderr)
    return 1


def cmd_precompile(args) -> int:
    from rapidrl.precompile import main as precompile_main

    return precompile_main(["--all"] if args.all else [])


def cmd_bench(rest: list[str]) -> int:
    from rapidrl.benchmarks.run import main as bench_main

    return int(bench_main(rest) or 0)


# -- parser ---------------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        raise CLIError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rapidrl", description="Fast reinforcement learning: train, evaluate and watch runs.",
                epilog="Your modules (--import MODULE, ENV as MODULE:EnvId) are imported from the current directory "
                       "first, as `python -m rapidrl` does.\nAn error is one line `rapidrl: error: ...`; --debug (or "
                       "RAPIDRL_DEBUG=1) shows its traceback.", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show the traceback of an error (also: RAPIDRL_DEBUG=1); "
                   "may stand anywhere on the command line")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    t = sub.add_parser("train", help="train an agent in a new run directory (or resume one)",
                       description="Train ALGO on ENV, then evaluate and save the model.\n\n"
                                   "Settings layer (later wins): algorithm defaults < preset configs/<algo>_<env>.toml"
                                   "\n< --config FILE < flags < --set. A new run directory runs/<algo>-<env>-<time>/"
                                   "\nholds config.toml, metrics.csv, TensorBoard events, checkpoints/, model.pt and"
                                   "\nsummary.json (docs/quickstart.md, docs/configs.md).",
                       epilog="examples:\n  rapidrl train ppo CartPole-v1 --timesteps 100000 --seed 0\n"
                              "  rapidrl train --config configs/ppo_pendulum.toml --set algo.learning_rate=1e-3\n"
                              "  rapidrl train ppo CartPole-v1 --detach   # then: rapidrl monitor --latest\n"
                              "  rapidrl train --resume runs/ppo-CartPole-v1-20261121-120000",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("algo", nargs="?", help="algorithm: see `rapidrl list algos`")
    t.add_argument("env", nargs="?", help="environment id: see `rapidrl list envs` (or any Gymnasium id)")
    t.add_argument("--config", metavar="FILE.toml", help="TOML file with [run], [algo], [env] sections")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one setting, e.g. --set algo.learning_rate=3e-4 --set env.max_episode_steps=200")
    t.add_argument("--timesteps", type=int, metavar="N", help="total environment steps (run.timesteps)")
    t.add_argument("--seed", type=int, metavar="S", help="seed (run.seed)")
    t.add_argument("--seeds", metavar="SPEC", help="train several seeds (e.g. 0-4 or 0,2,5) as parallel processes "
                   "into one experiment directory; then the IQM of their evals (rapidrl plot EXPERIMENT)")
    t.add_argument("--jobs", type=int, metavar="N", help="with --seeds: processes at a time (default: cores)")
    t.add_argument("--eval-episodes", type=int, metavar="N",
                   help="episodes of the final evaluation, 0 to skip (run.eval_episodes)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its latest checkpoint, same total")
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--monitor", action="store_true", help="train in a background process and watch it here")
    mode.add_argument("--detach", action="store_true", help="train in the background, logging to RUN_DIR/train.log")
    t.add_argument("--headless", action="store_true", help="no progress bar; a progress line every few seconds")
    t.add_argument("--distributed", action="store_true",
                   help="one learner per process under torchrun (needs --run-dir); rank 0 logs and saves")
    t.add_argument("--run-dir", metavar="DIR", help="use DIR as the run directory (default: a new one in --runs-root)")
    t.add_argument("--runs-root", default="runs", metavar="DIR", help="where new run directories go (default: runs)")
    t.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: it registers your envs (or give ENV as MODULE:EnvId); found from the "
                        "current directory first, as `python -m rapidrl` finds it")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="evaluate a trained run (or a model .pt file)",
                       epilog="example: rapidrl eval runs/ppo-CartPole-v1-20261121-120000 --episodes 10 "
                              "--video play.gif")
    e.add_argument("run", metavar="RUN_DIR",
                   help="run directory (uses model.pt, else its newest checkpoint) or a .pt file")
    e.add_argument("--episodes", type=int, default=10, help="evaluation episodes (default: 10)")
    e.add_argument("--stochastic", action="store_true",
                   help="sample actions as in training (DQN: epsilon-greedy) instead of the policy's mode, as the "
                        "published Atari figures do; seeded, so repeatable")
    e.add_argument("--video", metavar="OUT.gif|OUT.mp4", help="also record one episode (mp4 needs imageio-ffmpeg)")
    e.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (a run records the module of an env it registered and imports it itself)")
    e.set_defaults(func=cmd_eval)

    m = sub.add_parser("monitor", help="watch runs live (a separate process: attach and detach at will)",
                       epilog="examples:\n  rapidrl monitor --latest\n  rapidrl monitor runs/a runs/b\n"
                              "  rapidrl monitor --list", formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run directories (default: the newest under --runs-root)")
    m.add_argument("--latest", action="store_true", help="watch the newest run under --runs-root")
    m.add_argument("--list", action="store_true", help="list the runs under --runs-root with status and progress")
    m.add_argument("--runs-root", default="runs", metavar="DIR", help="where to look for runs (default: runs)")
    m.add_argument("--once", action="store_true", help="print one frame and exit")
    m.add_argument("--refresh", type=float, default=4.0, metavar="HZ", help="redraws per second (default: 4)")
    m.set_defaults(func=cmd_monitor)

    li = sub.add_parser("list", help="list algorithms, built-in environments or presets")
    li.add_argument("what", nargs="?", choices=["algos", "envs", "presets"], help="what to list (default: all)")
    li.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="import MODULE first (its registered envs are listed)")
    li.set_defaults(func=cmd_list)

    pl = sub.add_parser("plot", help="plot learning curves of runs, or of an experiment's seeds (mean, band, IQM)")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR", help="one or more run directories, or one experiment")
    pl.add_argument("--out", metavar="FILE.png", help="image to write (default: RUN_DIR/curves.png of the first run)")
    pl.set_defaults(func=cmd_plot)

    ex = sub.add_parser("export", help="export a run's deterministic policy (ONNX or TorchScript)",
                        epilog="example: rapidrl export runs/ppo-CartPole-v1-20261121-120000 --format onnx")
    ex.add_argument("run", metavar="RUN_DIR", help="run directory (uses model.pt, else its newest checkpoint) or a .pt")
    ex.add_argument("--format", default="onnx", help="onnx (needs the export extra) or torchscript (default: onnx)")
    ex.add_argument("--out", metavar="FILE", help="output file (default: RUN_DIR/policy.onnx or RUN_DIR/policy.ts)")
    ex.set_defaults(func=cmd_export)

    tu = sub.add_parser("tune", help="tune hyperparameters with Optuna (parallel, resumable, with pruning)",
                        epilog="example: rapidrl tune ppo CartPole-v1 --trials 50 --jobs 2 --storage sqlite:///t.db")
    tu.add_argument("algo", help="algorithm: see `rapidrl list algos`")
    tu.add_argument("env", help="environment id")
    tu.add_argument("--trials", type=int, default=50, help="trials in the study, all processes together (default 50)")
    tu.add_argument("--jobs", type=int, default=1, help="worker processes on this machine (default 1)")
    tu.add_argument("--storage", default="sqlite:///tune.db",
                    help="Optuna storage URL shared by all workers (default sqlite:///tune.db)")
    tu.add_argument("--study", help="study name (default ALGO-ENV); the same name resumes or joins a study")
    tu.add_argument("--timesteps", type=int, default=50_000, help="env steps per trial (default 50000)")
    tu.add_argument("--pruner", default="median", help="median, halving or none (default median)")
    tu.add_argument("--space", metavar="FILE.toml", help="search space (default rapidrl/configs/spaces/ALGO.toml)")
    tu.add_argument("--eval-every", type=int, help="env steps between evaluations reported to the pruner "
                    "(default timesteps/5)")
    tu.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation (default 5)")
    tu.add_argument("--seed", type=int, default=0, help="seed of the trials and of the sampler (default 0)")
    tu.add_argument("--out", metavar="DIR", help="study directory: trial run dirs, best.toml (default tune/STUDY)")
    tu.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    tu.set_defaults(func=cmd_tune)

    co = sub.add_parser("collect", help="write an offline dataset (Minari format) from a trained run",
                        description="Write a Minari dataset: episodes of a run's policy (--steps), or the run's "
                                    "replay buffer (--from-replay),\nwith reference scores for normalisation "
                                    "(docs/offline.md).",
                        epilog="examples:\n  rapidrl collect runs/sac-Hopper-v5-1 --steps 100000 --stochastic "
                               "--dataset-id rapidrl/hopper/medium-v0\n"
                               "  rapidrl collect runs/sac-Hopper-v5-1/checkpoints/step_000000100000.pt --from-replay",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    co.add_argument("run", metavar="RUN_DIR", help="run directory (model.pt, else its newest checkpoint) or a .pt file")
    co.add_argument("--steps", type=int, metavar="N", help="transitions to collect with the policy")
    co.add_argument("--from-replay", action="store_true", help="write the run's saved replay buffer instead")
    co.add_argument("--stochastic", action="store_true", help="sample actions as in training (default: the mode)")
    co.add_argument("--noise", type=float, default=0.0, metavar="SIGMA",
                    help="Box actions: add Gaussian noise of this std (a fraction of the half-range), clipped")
    co.add_argument("--epsilon", type=float, default=0.0, metavar="EPS", help="Discrete actions: epsilon-greedy")
    co.add_argument("--dataset-id", metavar="ID",
                    help="namespace/name-vN (default rapidrl/<env>/<algo>-<kind>-<step>-v0)")
    co.add_argument("--num-envs", type=int, default=8, help="envs stepped together (default 8)")
    co.add_argument("--seed", type=int, help="seed of the envs and the noise (default: the run's)")
    co.add_argument("--ref-min", type=float, metavar="R", help="random return (default: measured, uniform actions)")
    co.add_argument("--ref-max", type=float, metavar="R", help="expert return (default: --expert's or this policy's)")
    co.add_argument("--expert", metavar="RUN_DIR", help="the expert whose deterministic return is ref_max_score")
    co.add_argument("--ref-episodes", type=int, default=10, help="episodes per reference score (default 10)")
    co.add_argument("--root", metavar="DIR", help="datasets directory (default $MINARI_DATASETS_PATH or "
                    "~/.minari/datasets)")
    co.set_defaults(func=cmd_collect)

    pc = sub.add_parser("precompile", help="compile the Numba kernels ahead of the first run (cached on disk)")
    pc.add_argument("--all", action="store_true", help="every built-in env, not only the main job's kernels")
    pc.set_defaults(func=cmd_precompile)

    sub.add_parser("bench", help="run the benchmark suite against installed peers (args go to rapidrl.benchmarks)",
                   add_help=False)
    return p


def _dataset_error() -> type:
    """``rapidrl.buffers.dataset.DatasetError`` (bad offline data: one line, like a bad setting)."""
    from rapidrl.buffers.dataset import DatasetError

    return DatasetError


def _expected_errors() -> tuple[type, ...]:
    """The exceptions that are a user's failure, not rapidrl's: printed as one line (``--debug``: the traceback)."""
    from rapidrl.envs.core.base import ActionMaskError
    from rapidrl.train.checkpoint import ModelFileError

    return (CLIError, ConfigError, OSError, RunInUseError, ModelFileError, ActionMaskError, _dataset_error())






def error_line(e: BaseException) -> str:
    """The ``rapidrl: error: ...`` line's text for an expected failure."""
    if isinstance(e, OSError) and not isinstance(e, RunInUseError):
        return os_error_line(e)
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _cwd_first() -> None:
    """Put the current directory first on sys.path, as ``python -m rapidrl`` does (not under ``python -P`` /
    PYTHONSAFEPATH, as python would not): the ``rapidrl`` script then finds the user's ``--import`` modules."""
    if getattr(sys.flags, "safe_path", False):
        return
    cwd = os.getcwd()
    if sys.path[:1] not in ([""], [cwd]):
        sys.path.insert(0, cwd)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rapidrl`` and ``python -m rapidrl``; returns the exit code.

    Expected failures print one line ``rapidrl: error: ...`` (exit code 2); ``--debug`` anywhere before ``--``, or
    the environment variable ``RAPIDRL_DEBUG=1``, raises them with their traceback instead."""
    if argv is None:
        _cwd_first()
    argv = list(sys.argv[1:] if argv is None else argv)
    head = argv[:argv.index("--")] if "--" in argv else argv
    debug = "--debug" in head or os.environ.get("RAPIDRL_DEBUG", "") not in ("", "0")
    if "--debug" in head and not (argv and argv[0] == "bench"):
        argv.remove("--debug")
    parser = build_parser()
    try:
        if argv and argv[0] == "bench":
            return cmd_bench(argv[1:])
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        args.imported = _import_modules(getattr(args, "imports", []))
        if getattr(args, "refresh", 1.0) <= 0:
            raise CLIError("--refresh must be > 0")
        return args.func(args)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except _expected_errors() as e:
        if debug:
            raise
        print(f"rapidrl: error: {error_line(e)}", file=sys.stderr)
        return 2

"""Many seeds, one experiment: run the seeds of one configuration as parallel processes, then summarize.

``rapidrl train ppo CartPole-v1 --seeds 0-4`` creates ``runs/<algo>-<env>-<time>-seeds/`` holding
``experiment.toml`` (the seeds and the command) and one ordinary run directory per seed (``seed-0/``, ...),
each trained by its own ``rapidrl train ... --seed K --run-dir DIR --headless`` process, at most one per
usable core at a time. ``rapidrl plot EXPERIMENT`` draws the mean learning curve with a bootstrap 95% band
and reports the interquartile mean (IQM) of the seeds' final evaluations with a bootstrap 95% interval, the
aggregate that Agarwal et al. (2021, "Deep RL at the edge of the statistical precipice") recommend over the
mean (outlier seeds) and the median (high variance). The statistics are small pure functions here rather than
the ``rliable`` package, whose dependencies (pandas, seaborn, arch) are heavier than the two formulas.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from rapidrl._system import usable_cpu_count
from rapidrl.runs.layout import METRICS_CSV, SUMMARY_FILE, read_csv_metrics

EXPERIMENT_FILE = "experiment.json"
CURVE_KEY = "charts/episodic_return"


def parse_seeds(spec: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,5"`` -> [0, 2, 5]; ranges and lists combine (``"0-2,7"``)."""
    seeds: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                seeds.extend(range(lo, hi + 1))
            elif part:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"--seeds must be like 0-4 or 0,2,5 (non-negative ints), got {spec!r}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must name distinct non-negative seeds, got {spec!r}")
    return seeds


def iqm(values) -> float:
    """Interquartile mean: the mean of the middle 50% of ``values`` (scipy's ``trim_mean(values, 0.25)``: with
    n values, floor(n/4) are dropped at each end)."""
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if x.size == 0:
        raise ValueError("iqm needs at least one value")
    cut = int(0.25 * x.size)
    return float(x[cut:x.size - cut].mean())


def bootstrap_ci(values, statistic=iqm, *, resamples: int = 2000, level: float = 0.95, seed: int = 0
                 ) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over the seeds (resampled with replacement)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = np.random.default_rng(seed)
    stats = np.array([statistic(x[rng.integers(0, x.size, x.size)]) for _ in range(resamples)])
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def mean_curve(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 100, seed: int = 0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean of the seeds' curves on a common step grid (linear interpolation inside each curve's range) and a
    bootstrap 95% band of that mean: (steps, mean, low, high), each [points]."""
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        raise ValueError("no curve has any point")
    grid = np.linspace(max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves), points)
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])  # [seeds, points]
    rng = np.random.default_rng(seed)
    boot = np.stack([ys[rng.integers(0, len(ys), len(ys))].mean(0) for _ in range(1000)])  # [1000, points]
    return grid, ys.mean(0), np.quantile(boot, 0.025, axis=0), np.quantile(boot, 0.975, axis=0)


def run_seeds(exp_dir: Path, seeds: list[int], train_argv: list[str], jobs: int | None = None) -> dict[int, int]:
    """Train every seed as ``rapidrl train *train_argv --seed K --run-dir exp_dir/seed-K --headless`` processes,
    at most ``jobs`` (default: usable cores) at a time; each process's output goes to its run dir's train.log.
    The output of seed K's process goes to ``exp_dir/seed-K.log``. Returns seed -> exit code."""
    exp_dir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or usable_cpu_count()
    (exp_dir / EXPERIMENT_FILE).write_text(json.dumps({"seeds": seeds, "argv": train_argv}, indent=1))
    pending, running, codes = list(seeds), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            run_dir = exp_dir / f"seed-{seed}"
            log = open(exp_dir / f"seed-{seed}.log", "w")
            cmd = [sys.executable, "-m", "rapidrl", "train", *train_argv, "--seed", str(seed), "--run-dir",
                   str(run_dir), "--headless"]
            running[seed] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log)
            print(f"seed {seed}: started ({run_dir})", flush=True)
        for seed, (proc, log) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                codes[seed] = proc.returncode
                del running[seed]
                result = _summary(exp_dir / f"seed-{seed}")
                ev = result.get("eval_mean")
                print(f"seed {seed}: {'finished' if proc.returncode == 0 else f'failed (exit {proc.returncode})'}"
                      f"{f', eval {ev:.1f}' if ev is not None else ''}", flush=True)
        time.sleep(0.2)
    return codes


def _summary(run_dir: Path) -> dict:
    path = run_dir / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def is_experiment(path: Path) -> bool:
    return (Path(path) / EXPERIMENT_FILE).is_file()


def summarize(exp_dir: Path) -> dict:
    """Per-seed final evals, their IQM and mean with bootstrap 95% intervals, and the curves."""
    meta = json.loads((Path(exp_dir) / EXPERIMENT_FILE).read_text())
    evals, curves = {}, []
    for seed in meta["seeds"]:
        run = Path(exp_dir) / f"seed-{seed}"
        summary = _summary(run)
        if summary.get("eval_mean") is not None:
            evals[seed] = float(summary["eval_mean"])
        if (run / METRICS_CSV).is_file():
            cols = read_csv_metrics(run / METRICS_CSV)
            pts = [(x, y) for x, y in zip(cols.get("global_step", []), cols.get(CURVE_KEY, []))
                   if np.isfinite(x) and np.isfinite(y)]
            if pts:
                curves.append((np.array([p[0] for p in pts]), np.array([p[1] for p in pts])))
    out = {"seeds": meta["seeds"], "evals": evals, "curves": curves}
    if evals:
        values = list(evals.values())
        out.update(iqm=iqm(values), iqm_ci=bootstrap_ci(values), mean=float(np.mean(values)),
                   mean_ci=bootstrap_ci(values, np.mean))
    return out


def plot_experiment(exp_dir: Path, out: Path) -> tuple[Path, dict]:
    """Mean training curve of the seeds with a bootstrap 95% band; returns (image, ``summarize`` result)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarize(exp_dir)
    if not s["curves"]:
        raise ValueError(f"nothing to plot: no {CURVE_KEY} in the seeds' {METRICS_CSV} under {exp_dir}")
    steps, mean, lo, hi = mean_curve(s["curves"])
    fig, ax = plt.subplots(figsize=(8, 4))
    for x, y in s["curves"]:
        ax.plot(x, y, color="grey", alpha=0.3, linewidth=0.8)
    ax.plot(steps, mean, label=f"mean of {len(s['curves'])} seeds")
    ax.fill_between(steps, lo, hi, alpha=0.3, label="bootstrap 95% band")
    title = Path(exp_dir).name
    if "iqm" in s:
        title += f"  (final eval IQM {s['iqm']:.1f}, 95% CI [{s['iqm_ci'][0]:.1f}, {s['iqm_ci'][1]:.1f}])"
    ax.set_title(title, fontsize="small")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return (training)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out, s

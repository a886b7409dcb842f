"""Learning results at the standard budgets, beside the published ones: ``python -m tools.results`` (repository
tooling, run from the repository root; not part of the rapidrl package).

    python -m tools.results list                     # the rows, their budgets and published figures
    python -m tools.results ppo-hopper               # run a row's missing seeds, then update docs/RESULTS.md
    python -m tools.results ppo-hopper --seeds 0-2   # these seeds (already recorded ones are kept, not re-run)
    python -m tools.results --quick                  # every row, short budget, one seed, into bench_results/
    python -m tools.results ppo-breakout --progress  # train nothing: record how far its unfinished run has got
    python -m tools.results datasets [TASK ...]      # rebuild the offline rows' datasets (tools/dataset_sources)

The rows are data: ``tools/results/rows.toml`` (how to add one: tools/results/README.md).

A row is a task, an algorithm, a budget and seeds; it trains with the shipped preset for its algorithm and env
(``rapidrl/configs``), each seed as its own ``rapidrl train ... --headless`` process, one at a time (so the
wall-clock is that of a run alone on the machine). Each finished seed is appended to ``docs/results/<row>.csv``
(final deterministic evaluation, final training return, wall-clock, date, commit) with its learning curve in
``docs/results/<row>-curve.csv``; then ``docs/results/<row>.png`` and ``docs/RESULTS.md`` are redrawn from all
the CSVs. A row can therefore grow over several sessions: keep its CSVs in the repository. A seed whose run was
interrupted (a closed session, a kill) resumes from its run directory's last checkpoint when the row is run again,
if that run has the row's setting (``run_state``); one that finished but was not recorded is recorded as it is.
A seed not finished yet shows its progress: when its run is stopped (Ctrl-C, ``kill``), and on demand with
``--progress`` (which trains nothing, so it can read a run going on in another process), the steps it reached, its
training return and wall-clock so far go to ``docs/results/<row>-progress.csv`` and its curve so far to the curve
CSV, so a row that takes several sessions is in the repository as it grows.

Evaluation protocol (the ``eval`` column): the mean of ``eval_episodes`` (10 unless the preset says otherwise)
deterministic episodes on separate evaluation envs at the end of training, raw (unclipped, unnormalized)
rewards. The ``train`` column is the mean return of the last 20 training episodes (stochastic policy), the
figure CleanRL's tables report.

A row with a solve criterion (``Row.solve``, the ``memory`` row) also measures how fast the task is solved: the run
writes a checkpoint every ``eval_every`` steps, and after training each checkpoint is evaluated with the same
protocol (``ALGO.load`` then ``evaluate``: the evaluation ``rapidrl eval`` runs, on envs seeded as an evaluation
in the training process would be). ``docs/results/<row>.csv`` then also holds ``solve_step`` (the first checkpoint
whose evaluation reaches ``solve``), ``solve_wall_s`` (the training wall-clock up to it: metrics.csv's
``time/total`` at that step, evaluations excluded since they run afterwards) and ``stable_step`` (the first
checkpoint from which every later evaluation reaches ``solve``; empty when the last does not);
``<row>-evals.csv`` holds every evaluation. A peer library's runs of the same task, written by a script of its own
(``Row.peer``, e.g. ``tools/results/sb3_contrib_memory.py``), are shown beside them.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from rapidrl.runs.layout import CHECKPOINT_DIR, CONFIG_FILE, METRICS_CSV, SUMMARY_FILE, read_csv_metrics

__all__ = ["ROWS", "ROWS_FILE", "Published", "Row", "draw_row", "load_rows", "main", "plot_series", "record_progress",
           "record_seed", "run_row", "write_page"]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS_MD = "RESULTS.md"
COMMAND = "python -m tools.results"
"""The command line of this tool, as the page and its messages name it."""
CURVE_POINTS = 200


@dataclass(frozen=True)
class Published:
    """A published figure: ``value`` (mean) and ``spread`` (std over seeds, or None), its source and setting."""

    value: float
    source: str
    setting: str
    spread: float | None = None

    def text(self) -> str:
        value = f"{self.value:g}" + (f" ± {self.spread:g}" if self.spread is not None else "")
        return f"{value} ({self.setting})"


@dataclass(frozen=True)
class Row:
    """One line of the results page."""

    name: str
    family: str
    algo: str
    env: str
    timesteps: int
    seeds: tuple[int, ...]
    published: tuple[Published, ...] = ()
    quick_timesteps: int = 10_000
    sets: tuple[str, ...] = ()
    """``--set`` assignments on top of the preset: run settings (``run.checkpoint_every``) and the task variant of
    the published figures (``env.*``: Atari without sticky actions, as the v4 ids they used); the preset is the
    row's learning setting."""
    quick_sets: tuple[str, ...] = ()
    """Extra assignments of the quick version only (e.g. shorter Atari games for the final evaluation)."""
    notes: str = ""
    solve: float | None = None
    """A return that solves the task: the row then also records the steps and wall-clock to reach it (module
    docstring); None: final results only."""
    eval_every: int = 0
    """Steps between two checkpoints evaluated after training (their evaluations are the curve's dots; with ``solve``
    they also time the solve); 0: none."""
    peer: str = ""
    """With ``solve``: the stem of a peer library's CSVs in the results directory (``<peer>.csv``,
    ``<peer>-evals.csv``, written by its own script), shown beside the row; empty: none."""
    curve_metric: str = "charts/episodic_return"
    """The metrics.csv column of the learning curve and the ``train`` column (MAPPO: the team return, the figure its
    evaluation reports, rather than the mean per-agent return)."""
    pending: str = ""
    """Why the row has no results yet (what it costs to run here); shown under the table only while its CSV is
    empty."""
    normalize: tuple[float, ...] = ()
    """An offline row's (random, expert) reference returns, its dataset's: the eval column also gives D4RL's
    normalised score 100 (eval - random) / (expert - random), the scale of its published figures; empty: none."""
    evals: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    """More evaluations of the final model, each with other env settings: (label, ((env setting, value), ...))
    (``rows.toml``: ``evals = [{ label = "vs random", env = { lookahead = 0.0 } }]``), as many episodes as the final
    evaluation; the CSV keeps each one's mean and std (``eval[label]``, ``eval[label]_std``) and the page shows them
    in the eval column. Empty: none."""
    outcomes: bool = False
    """The task's episode returns are +1 (win), 0 (draw) or -1 (loss) (games): the page shows each of ``evals`` as
    win / draw / loss rates, exact from its mean m and population std s (win = (s^2 + m^2 + m) / 2, loss =
    (s^2 + m^2 - m) / 2)."""
    config: str = ""
    """A preset variant under ``rapidrl/configs`` (``variants/iql_hopper_finetune.toml``) trained instead of the
    automatic preset of ``algo`` and ``env`` (which it is layered on, as ``rapidrl train --config``); empty: none."""

    def config_path(self) -> Path | None:
        """The file of ``config`` (None: the automatic preset alone)."""
        from rapidrl.runs.config import PRESETS_DIR

        return PRESETS_DIR / self.config if self.config else None

    def train_argv(self, timesteps: int, quick: bool) -> list[str]:
        argv = [self.algo, self.env, "--timesteps", str(timesteps)]
        if self.config:
            argv += ["--config", str(self.config_path())]
        sets = self.sets + (self.quick_sets if quick else ())
        if self.eval_every:  # every evaluated checkpoint is kept (a run setting: the preset stays the setting)
            sets += (f"run.checkpoint_every={self.eval_every}", f"run.checkpoint_keep={_KEEP_ALL}")
        for assignment in sets:
            argv += ["--set", assignment]
        return argv


_KEEP_ALL = 100_000


ROWS_FILE = Path(__file__).with_name("rows.toml")
"""The rows as data (how to add one: tools/results/README.md)."""
_ROW_FIELDS = {f.name for f in fields(Row)}
_PUBLISHED_FIELDS = {f.name for f in fields(Published)}


def load_rows(path: Path = ROWS_FILE) -> dict[str, Row]:
    """The rows of ``path`` (``rows.toml``) by name, in file order: each ``[[row]]`` table holds ``Row``'s fields
    (lists for its tuples; ``published`` a list of ``Published``'s fields); in its text fields (``notes``,
    ``pending``, a published ``setting``) ``{key}`` is the ``[texts]`` entry ``key`` and ``{name}`` the row's name.
    A misspelt field, a missing one, an unknown text key or a repeated name is a ValueError naming the row."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    rows: dict[str, Row] = {}
    for k, entry in enumerate(data.get("row", [])):
        name = entry.get("name", f"#{k}")
        where = f"{path}: row {name!r}"
        texts = {key: text.format(name=name) for key, text in data.get("texts", {}).items()}

        def text(value: str, where: str = where, texts: dict = texts, name: str = name) -> str:
            try:
                return value.format(name=name, **texts)
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"{where}: {value[:40]!r}...: no text {e} (the [texts] table has "
                                 f"{', '.join(texts) or 'none'})") from None

        if unknown := set(entry) - _ROW_FIELDS:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; a row has "
                             f"{', '.join(sorted(_ROW_FIELDS))}")
        published = []
        for figure in entry.get("published", []):
            if unknown := set(figure) - _PUBLISHED_FIELDS:
                raise ValueError(f"{where}: unknown published field(s) {', '.join(sorted(unknown))}")
            published.append(Published(**{**figure, "setting": text(figure.get("setting", ""))}))
        evals = tuple((ev["label"], tuple(sorted(ev.get("env", {}).items()))) for ev in entry.get("evals", []))
        values = {**entry, "published": tuple(published), "evals": evals,
                  **{key: tuple(entry[key]) for key in ("seeds", "sets", "quick_sets", "normalize") if key in entry},
                  **{key: text(entry[key]) for key in ("notes", "pending") if key in entry}}
        try:
            row = Row(**values)
        except TypeError as e:
            raise ValueError(f"{where}: {e}") from None
        if row.name in rows:
            raise ValueError(f"{where}: a second row of that name")
        rows[row.name] = row
    return rows


ROWS: dict[str, Row] = load_rows()


# -- recording ------------------------------------------------------------------------------------------

def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


RESULT_FIELDS = ["seed", "timesteps", "eval_mean", "eval_std", "eval_episodes", "train_return", "wall_s", "sps",
                 "date_utc", "commit"]
SOLVE_FIELDS = ["solve_step", "solve_wall_s", "stable_step"]
"""The extra columns of a row with a solve criterion (module docstring)."""
PROGRESS_FIELDS = ["seed", "steps", "budget", "train_return", "wall_s", "date_utc", "commit", "run_dir"]
"""A seed not finished yet: the steps its run reached, its training return and training wall-clock there."""
RUNS_ROOT = Path("runs/results")
COMMITTED_DIR = "resume"
"""The subdirectory of an unfinished seed's run directory that holds its newest checkpoint for git (.gitignore lets
``runs-in-progress/**/resume/*.pt`` through): a run that outlasts its machine continues from it on the next one."""
MAX_COMMITTED_BYTES = 2 * 2**20
"""The largest checkpoint kept for git (``tests/test_repo_hygiene.py`` fails on a tracked file over 2 MiB)."""
"""``--runs-root``'s default: the run directories are ``<runs root>/{full,quick}/<row>/seed-<n>`` (seed_run_dir)."""
RUN_KINDS = ("full", "quick")
"""The level of a run directory under the runs root that says which budget it trains: the row's, or --quick's."""

CURVE_FIELDS = ["seed", "step", "episodic_return"]
EVAL_FIELDS = ["seed", "step", "eval_mean", "wall_s"]


class RunDirError(ValueError):
    """A run directory that is not ``<runs root>/{full,quick}/<row>/seed-<n>`` (a hand-edited progress CSV)."""

    def __init__(self, run_dir: str, row_name: str):
        super().__init__(f"run directory {run_dir!r} of row {row_name!r} is not "
                         f"<runs root>/{{full,quick}}/{row_name}/seed-<n>")
        self.row_name = row_name


def seed_run_dir(runs_root: Path, row_name: str, seed: int, quick: bool = False) -> Path:
    """The run directory of one seed of a row: ``<runs root>/{full,quick}/<row>/seed-<n>``."""
    return runs_root / RUN_KINDS[quick] / row_name / f"seed-{seed}"


def continue_command(row_name: str, run_dir: str | Path | None) -> str:
    """The command that continues the unfinished run in ``run_dir`` (``<runs root>/{full,quick}/<row>/seed-<n>``;
    None or "": one recorded before the progress kept its run directory, taken to be a full run under the default
    root). A run directory of another shape (a hand-edited progress CSV) is a RunDirError naming it."""
    if not run_dir:
        return f"{COMMAND} {row_name}"
    seed_dir = Path(run_dir)
    kind_dir = seed_dir.parent.parent
    if kind_dir.name not in RUN_KINDS or seed_dir.parent.name != row_name \
            or not seed_dir.name.startswith("seed-"):
        raise RunDirError(seed_dir.as_posix(), row_name)
    quick = kind_dir.name == RUN_KINDS[True]  # seed_run_dir's RUN_KINDS[quick]
    return (f"{COMMAND} {row_name}" + (" --quick" if quick else "")
            + ("" if kind_dir.parent == RUNS_ROOT else f" --runs-root {kind_dir.parent.as_posix()}"))


def _curve(cols: dict[str, list[float]], metric: str = "charts/episodic_return") -> list[tuple[float, float]]:
    """(step, training return) points of a run's parsed metrics.csv (``read_csv_metrics``; the ``metric``
    column), thinned to at most CURVE_POINTS."""
    pts = [(x, y) for x, y in zip(cols.get("global_step", []), cols.get(metric, []))
           if math.isfinite(x) and math.isfinite(y)]
    if len(pts) > CURVE_POINTS:
        keep = np.unique(np.linspace(0, len(pts) - 1, CURVE_POINTS).round().astype(int))
        pts = [pts[i] for i in keep]
    return pts


def _wall_at_steps(cols: dict[str, list[float]]) -> dict[int, float]:
    """Training wall-clock (``time/total``, seconds since ``learn`` started) at each logged step of a run's parsed
    metrics.csv (``read_csv_metrics``)."""
    return {int(x): t for x, t in zip(cols.get("global_step", []), cols.get("time/total", [])) if math.isfinite(t)}


def _wall_at(wall: dict[int, float], step: int) -> float:
    """The wall-clock at ``step`` from the logged (step -> wall-clock) points: the logged value at that step, else
    linear between the logged steps around it (off-policy runs log every ``log_every_steps`` env steps, which need
    not fall on a checkpoint's step); NaN outside the logged range."""
    if step in wall:
        return wall[step]
    before = [x for x in wall if x < step]
    after = [x for x in wall if x > step]
    if not before or not after:
        return math.nan
    lo, hi = max(before), min(after)
    return wall[lo] + (wall[hi] - wall[lo]) * (step - lo) / (hi - lo)


def evaluate_checkpoints(row: Row, run_dir: Path, episodes: int, wall: dict[int, float]
                         ) -> list[tuple[int, float, float]]:
    """(step, evaluation mean, training wall-clock at that step) of every checkpoint of a finished run, oldest
    first: each is loaded and evaluated as ``rapidrl eval`` does (``episodes`` deterministic episodes). wall: the
    wall-clock at each logged step (``_wall_at_steps``), read at a checkpoint's step by ``_wall_at``."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.train.checkpoint import list_checkpoints

    cls = get_algorithm(row.algo)
    evals = []
    for step, path in list_checkpoints(run_dir / CHECKPOINT_DIR):
        model = cls.load(path)
        evals.append((step, model.evaluate(episodes)[0], _wall_at(wall, step)))
        model.env.close()
    return evals


def evaluate_final(row: Row, run_dir: Path, episodes: int) -> dict[str, tuple[float, float]]:
    """label -> (mean, std) of the final model's evaluations with each of ``row.evals``' env settings over the run's
    own (``ALGO.load`` with the merged env settings, then ``evaluate(episodes)``, deterministic)."""
    if not row.evals:
        return {}
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.runs.config import load_run_config
    from rapidrl.runs.layout import MODEL_FILE

    base = load_run_config(run_dir).env_kwargs
    out = {}
    for label, settings in row.evals:
        model = get_algorithm(row.algo).load(run_dir / MODEL_FILE, env_kwargs={**base, **dict(settings)})
        out[label] = model.evaluate(episodes)
    return out


def outcome_rates(mean: float, std: float) -> tuple[float, float, float]:
    """(win, draw, loss) rates of returns in {+1, 0, -1} with this mean and population std (``Row.outcomes``)."""
    second = std * std + mean * mean  # E[r^2] = P(win) + P(loss)
    win, loss = (second + mean) / 2, (second - mean) / 2
    return win, 1.0 - win - loss, loss


def solve_summary(evals: list[tuple[int, float, float]], solve: float) -> dict:
    """``SOLVE_FIELDS`` of a run's (step, eval, wall) evaluations: the first step reaching ``solve`` and the wall-clock
    to it, and the first step from which every later evaluation reaches it ("" where none)."""
    first = next(((step, wall) for step, mean, wall in evals if mean >= solve), None)
    stable = ""
    for step, mean, _ in reversed(evals):
        if mean < solve:
            break
        stable = step
    return {"solve_step": first[0] if first else "", "solve_wall_s": round(first[1], 1) if first else "",
            "stable_step": stable}


def run_state(run_dir: Path, row: Row, timesteps: int, seed: int) -> str:
    """What a seed's run directory holds for ``row`` at a budget of ``timesteps``: "finished" (trained, not
    recorded yet), "resumable" (a checkpoint of the same setting: an interrupted run) or "" (nothing to keep).
    The same setting: algo, env, budget and seed, and every value the preset (with the row's ``config`` variant)
    and the row's ``sets`` set now. A run with no checkpoint but a committed one (``resume/``, a fresh clone) gets it
    back first (``restore_committed``): the one thing this check writes."""
    from rapidrl.runs.config import parse_set, preset_path, read_toml
    from rapidrl.train.checkpoint import latest_checkpoint

    try:
        saved = read_toml(run_dir / CONFIG_FILE)
        preset = read_toml(preset_path(row.algo, row.env))
        if row.config:  # the variant layered on the preset (rapidrl train --config)
            variant = read_toml(row.config_path())
            preset = {s: {**preset.get(s, {}), **variant.get(s, {})} for s in ("algo", "env")}
    except (OSError, ValueError):
        return ""
    run = saved.get("run", {})
    if (run.get("algo"), run.get("env"), run.get("timesteps"), run.get("seed")) != (row.algo, row.env, timesteps,
                                                                                   seed):
        return ""
    if any(saved.get(section, {}).get(key) != value
           for section in ("algo", "env") for key, value in preset.get(section, {}).items()):
        return ""  # the preset changed since: that run is not this row's setting
    if any(saved.get(section, {}).get(key) != value for section, key, value in map(parse_set, row.sets)):
        return ""  # so did the row's own settings
    try:
        if json.loads((run_dir / SUMMARY_FILE).read_text()).get("status") == "finished":
            return "finished"
    except (OSError, ValueError):
        pass
    restore_committed(run_dir)
    return "resumable" if latest_checkpoint(run_dir / CHECKPOINT_DIR) is not None else ""


def keep_for_git(run_dir: Path) -> str:
    """Copy the newest checkpoint of an unfinished run into ``run_dir/resume/`` (replacing the one there) when git can
    hold it: under ``MAX_COMMITTED_BYTES`` and without a replay buffer. Returns the line that says what was done."""
    from rapidrl.train.checkpoint import buffer_dir, latest_checkpoint

    newest = latest_checkpoint(run_dir / CHECKPOINT_DIR)
    if newest is None:
        return ""
    if buffer_dir(newest).is_dir():
        return (f"{newest.name} carries a replay buffer: not for git (an off-policy row runs on one machine from "
                "start to end)")
    size = newest.stat().st_size
    if size > MAX_COMMITTED_BYTES:
        return f"{newest.name} is {size / 2**20:.1f} MiB, over {MAX_COMMITTED_BYTES / 2**20:.0f} MiB: not for git"
    keep = run_dir / COMMITTED_DIR
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    shutil.copy2(newest, keep / newest.name)
    return (f"{(keep / newest.name).as_posix()} ({size / 2**20:.2f} MiB): commit it with the run's config.toml and "
            "metrics.csv, and the row continues from it on another machine")


def restore_committed(run_dir: Path) -> Path | None:
    """A fresh clone holds an unfinished seed's committed checkpoint (``resume/``) but no ``checkpoints/``: copy it
    back where ``rapidrl train --resume`` looks. Returns the restored file, None when there was nothing to do."""
    from rapidrl.train.checkpoint import latest_checkpoint

    kept = sorted((run_dir / COMMITTED_DIR).glob("step_*.pt"))
    if not kept or latest_checkpoint(run_dir / CHECKPOINT_DIR) is not None:
        return None
    (run_dir / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(kept[-1], run_dir / CHECKPOINT_DIR / kept[-1].name))


def resume_step(row: Row, run_dir: Path) -> int:
    """The step of the checkpoint ``rapidrl train --resume`` continues from."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.train.checkpoint import resume_checkpoint

    return resume_checkpoint(run_dir / CHECKPOINT_DIR, get_algorithm(row.algo))[0]


def record_seed(row: Row, seed: int, run_dir: Path, out: Path) -> dict:
    """Append a finished seed's result and curve to ``out/<row>.csv`` and ``out/<row>-curve.csv`` (and, for a row
    with a solve criterion, its checkpoints' evaluations to ``out/<row>-evals.csv``)."""
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    if summary.get("status") != "finished":
        raise RuntimeError(f"{run_dir} did not finish ({summary.get('status')})")
    # training seconds of the learn call, a resumed run's earlier parts included (the checkpoint carries the clock);
    # summaries written before that field existed have only this process's wall-clock
    wall = summary.get("train_time_s", summary["wall_time_s"])
    metrics = run_dir / METRICS_CSV
    cols = read_csv_metrics(metrics) if metrics.is_file() else {}
    curve = _curve(cols, row.curve_metric)
    tail = [y for _, y in curve[-1:]]
    result = {"seed": seed, "timesteps": summary["timesteps"],
              "eval_mean": round(summary.get("eval_mean", math.nan), 2),
              "eval_std": round(summary.get("eval_std", math.nan), 2), "eval_episodes": summary.get("eval_episodes", 0),
              "train_return": round(tail[0], 2) if tail else "", "wall_s": round(wall, 1),
              "sps": round(summary["timesteps"] / max(wall, 1e-9), 1),
              "date_utc": _dt.datetime.now(_dt.timezone.utc).date().isoformat(), "commit": _git_commit()}
    fields = RESULT_FIELDS
    for label, (mean, std) in evaluate_final(row, run_dir, int(summary.get("eval_episodes") or 10)).items():
        result |= {f"eval[{label}]": round(mean, 4), f"eval[{label}]_std": round(std, 4)}
        fields = [*fields, f"eval[{label}]", f"eval[{label}]_std"]
    if row.eval_every:
        evals = evaluate_checkpoints(row, run_dir, int(summary.get("eval_episodes") or 10), _wall_at_steps(cols))
        if row.solve is not None:
            result |= solve_summary(evals, row.solve)
            fields = RESULT_FIELDS + SOLVE_FIELDS
        rows = [r for r in _read_csv(out / f"{row.name}-evals.csv") if int(r["seed"]) != seed]
        rows += [{"seed": seed, "step": step, "eval_mean": round(mean, 2), "wall_s": round(wall, 1)}
                 for step, mean, wall in evals]
        _write_csv(out / f"{row.name}-evals.csv", rows, EVAL_FIELDS)
    results = [r for r in _read_csv(out / f"{row.name}.csv") if int(r["seed"]) != seed] + [result]
    _write_csv(out / f"{row.name}.csv", sorted(results, key=lambda r: int(r["seed"])), fields)
    _write_curve(row, seed, curve, out)
    _drop_progress(row, seed, out)
    shutil.rmtree(run_dir / COMMITTED_DIR, ignore_errors=True)  # finished: its committed checkpoint is spent
    return result


def _write_curve(row: Row, seed: int, curve: list[tuple[float, float]], out: Path) -> None:
    """Replace ``seed``'s points in ``out/<row>-curve.csv`` with ``curve``."""
    curves = [r for r in _read_csv(out / f"{row.name}-curve.csv") if int(r["seed"]) != seed]
    curves += [{"seed": seed, "step": int(x), "episodic_return": round(y, 3)} for x, y in curve]
    _write_csv(out / f"{row.name}-curve.csv", curves, CURVE_FIELDS)


def _drop_progress(row: Row, seed: int, out: Path) -> None:
    path = out / f"{row.name}-progress.csv"
    rest = [r for r in _read_csv(path) if int(r["seed"]) != seed]
    if rest:
        _write_csv(path, rest, PROGRESS_FIELDS)
    else:
        path.unlink(missing_ok=True)


def record_progress(row: Row, seed: int, run_dir: Path, out: Path, budget: int) -> dict | None:
    """Record how far a seed's unfinished run has got (``PROGRESS_FIELDS`` in ``out/<row>-progress.csv``, its curve
    so far in ``out/<row>-curve.csv``) from its metrics.csv, which a running run keeps appending to; None (nothing
    written) when the run has logged nothing yet."""
    path = run_dir / METRICS_CSV
    if not path.is_file():
        return None
    cols = read_csv_metrics(path)
    logged = [(x, t) for x, t in zip(cols.get("global_step", []), cols.get("time/total", [])) if math.isfinite(x)]
    curve = _curve(cols, row.curve_metric)
    if not logged:
        return None
    steps, wall = logged[-1]
    progress = {"seed": seed, "steps": int(steps), "budget": budget,
                "train_return": round(curve[-1][1], 2) if curve else "",
                "wall_s": round(wall, 1) if math.isfinite(wall) else "",
                "date_utc": _dt.datetime.now(_dt.timezone.utc).date().isoformat(), "commit": _git_commit(),
                "run_dir": run_dir.as_posix()}
    rows = [r for r in _read_csv(out / f"{row.name}-progress.csv") if int(r["seed"]) != seed] + [progress]
    _write_csv(out / f"{row.name}-progress.csv", sorted(rows, key=lambda r: int(r["seed"])), PROGRESS_FIELDS)
    _write_curve(row, seed, curve, out)
    kept = keep_for_git(run_dir)
    if kept:
        print(f"{row.name} seed {seed}: {kept}", flush=True)
    return progress


class SeedNotFinished(RuntimeError):
    """A seed's training process ended before its budget: ``code`` is its exit code (130: stopped by a signal)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def run_training_process(argv: list[str]) -> int:
    """Run a ``rapidrl train`` process to its end; its exit code. SIGTERM sent to this process is passed on, and
    SIGINT (Ctrl-C, which the terminal sends to both) is left to the child: it stops at the end of its update and
    writes a checkpoint there (``StopOnSignal``), from which the row resumes when run again."""
    proc = subprocess.Popen(argv)
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
                signal.SIGTERM: signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_row(row: Row, seeds: tuple[int, ...], out: Path, runs_root: Path, quick: bool = False) -> list[dict]:
    """Train the seeds of ``row`` not yet recorded in ``out`` (one process at a time, each in its ``seed_run_dir``
    under ``runs_root``) and record them."""
    done = {int(r["seed"]) for r in _read_csv(out / f"{row.name}.csv")}
    timesteps = row.quick_timesteps if quick else row.timesteps
    recorded = []
    for seed in seeds:
        if seed in done:
            print(f"{row.name} seed {seed}: already recorded in {out / (row.name + '.csv')}", flush=True)
            continue
        run_dir = seed_run_dir(runs_root, row.name, seed, quick)
        state = run_state(run_dir, row, timesteps, seed)
        t0 = time.perf_counter()
        if state == "finished":
            print(f"{row.name} seed {seed}: {run_dir} finished training but was not recorded: recording it",
                  flush=True)
        else:
            if state == "resumable":  # an interrupted run (a session's end, a kill): continue it
                step = resume_step(row, run_dir)
                argv = [sys.executable, "-m", "rapidrl", "train", "--resume", str(run_dir), "--headless"]
                print(f"{row.name} seed {seed}: resuming the interrupted run in {run_dir} from step {step:,}",
                      flush=True)
            else:
                shutil.rmtree(run_dir, ignore_errors=True)
                argv = [sys.executable, "-m", "rapidrl", "train", *row.train_argv(timesteps, quick),
                        "--seed", str(seed), "--run-dir", str(run_dir), "--headless"]
                print(f"{row.name} seed {seed}: {' '.join(argv[3:])}", flush=True)
            code = run_training_process(argv)
            if code == 130:  # stopped at a checkpoint: what it reached goes on the page until it finishes
                record_progress(row, seed, run_dir, out, timesteps)
                draw_row(row, out)
            if code != 0:
                why = "was stopped (exit 130)" if code == 130 else f"failed (exit {code})"
                raise SeedNotFinished(f"{row.name} seed {seed} {why}; its run is in {run_dir} (run the row again, "
                                      f"`{continue_command(row.name, run_dir)}`, to resume it from its last "
                                      "checkpoint)", code)
        result = record_seed(row, seed, run_dir, out)
        solved = f", solved at {result['solve_step'] or '-'} steps ({result['solve_wall_s'] or '-'} s)" \
            if row.solve is not None else ""
        print(f"{row.name} seed {seed}: eval {result['eval_mean']} ± {result['eval_std']}, train "
              f"{result['train_return']}{solved}, {time.perf_counter() - t0:.0f} s", flush=True)
        recorded.append(result)
    draw_row(row, out)
    return recorded


def progress_row(row: Row, seeds: tuple[int, ...], out: Path, runs_root: Path, quick: bool = False) -> list[dict]:
    """Record the progress of ``row``'s seeds whose runs (this row's setting, in their ``seed_run_dir`` under
    ``runs_root``) are not finished, running or stopped; nothing is trained."""
    done = {int(r["seed"]) for r in _read_csv(out / f"{row.name}.csv")}
    timesteps = row.quick_timesteps if quick else row.timesteps
    recorded = []
    for seed in seeds:
        run_dir = seed_run_dir(runs_root, row.name, seed, quick)
        state = "" if seed in done else run_state(run_dir, row, timesteps, seed)
        if state == "finished":
            print(f"{row.name} seed {seed}: finished, not recorded yet: run the row to record it", flush=True)
        elif state == "resumable" and (progress := record_progress(row, seed, run_dir, out, timesteps)):
            print(f"{row.name} seed {seed}: at {progress['steps']:,} of {timesteps:,} steps, train return "
                  f"{progress['train_return']}, {progress['wall_s']} s of training", flush=True)
            recorded.append(progress)
    if recorded:
        draw_row(row, out)
    return recorded


# -- the page ---------------------------------------------------------------------------------------------

def _stats(values: list[float]) -> str:
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}"


def plot_series(row: Row, out: Path) -> list[dict]:
    """What ``draw_row`` plots of ``row``'s recorded seeds: dicts of label, kind ("train": a seed's training curve;
    "evals": its checkpoints' evaluations; "peer": a peer row's evaluations), seed, xs and ys. With ``row.normalize``
    (offline rows) the ys are D4RL's normalised score, the scale of the row's published figures."""
    if row.normalize:
        random, expert = row.normalize
        scale = lambda v: 100 * (v - random) / (expert - random)  # noqa: E731
    else:
        scale = lambda v: v  # noqa: E731

    def by_seed(path: Path, key: str) -> dict[str, list[tuple[float, float]]]:
        seeds: dict[str, list[tuple[float, float]]] = {}
        for r in _read_csv(path):
            seeds.setdefault(r["seed"], []).append((float(r["step"]), scale(float(r[key]))))
        return dict(sorted(seeds.items(), key=lambda kv: int(kv[0])))

    unfinished = {r["seed"] for r in _read_csv(out / f"{row.name}-progress.csv")}
    curves = by_seed(out / f"{row.name}-curve.csv", "episodic_return")
    evals = by_seed(out / f"{row.name}-evals.csv", "eval_mean")
    series = []
    for seed in sorted(set(curves) | set(evals), key=int):
        label = f"seed {seed}" + (" (in progress)" if seed in unfinished else "")
        for kind, points in (("train", curves.get(seed)), ("evals", evals.get(seed))):
            if points:
                series.append({"label": label, "kind": kind, "seed": int(seed), "xs": [p[0] for p in points],
                               "ys": [p[1] for p in points]})
    if row.peer:
        for seed, points in by_seed(out / f"{row.peer}-evals.csv", "eval_mean").items():
            series.append({"label": "peer evaluations", "kind": "peer", "seed": int(seed),
                           "xs": [p[0] for p in points], "ys": [p[1] for p in points]})
    return series


def draw_row(row: Row, out: Path) -> Path | None:
    """``out/<row>.png``: each seed's training curve (solid) and its checkpoints' evaluations (dotted; solid where
    the seed has no training curve, as offline rows), a peer row's evaluations and the published figures (None when
    no seed is recorded)."""
    series = plot_series(row, out)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    colours: dict[int, str] = {}
    curves = any(s["kind"] == "train" for s in series)
    labelled = set()
    for s in series:
        if s["kind"] == "peer":
            style = dict(linestyle=":", marker="x", markersize=3, linewidth=0.8, color="black")
        elif s["kind"] == "evals" and s["seed"] in colours:  # dotted, in the colour of the seed's training curve
            style = dict(linestyle=":", marker=".", markersize=3, linewidth=0.8, color=colours[s["seed"]])
        else:
            style = dict(linewidth=1, marker="." if s["kind"] == "evals" else None, markersize=4)
        label = None if s["label"] in labelled else s["label"]
        labelled.add(s["label"])
        line, = ax.plot(s["xs"], s["ys"], label=label, **style)
        if s["kind"] != "peer":
            colours.setdefault(s["seed"], line.get_color())
    for k, p in enumerate(row.published):  # labels side by side: published figures are often close
        ax.axhline(p.value, linestyle="--", linewidth=0.8, color="grey")
        ax.annotate(f"{p.source} {p.value:g}", (0.01 + 0.22 * k, p.value), xycoords=("axes fraction", "data"),
                    fontsize="x-small", color="grey", va="bottom")
    switch = _offline_steps(row)
    if switch:  # offline-to-online: gradient steps on the dataset up to the switch, env steps after it
        ax.axvline(switch, linestyle="-.", linewidth=0.8, color="grey")
        ax.annotate(" online from here", (switch, 0.02), xycoords=("data", "axes fraction"), fontsize="x-small",
                    color="grey")
    ax.set_title(f"{row.algo.upper()} {row.env}", fontsize="small")
    ax.set_xlabel(f"steps (the first {switch:,} on the dataset, then env steps)" if switch
                  else "env steps" if curves else "gradient steps" if row.normalize else "steps")
    dotted = " (dotted: evaluations)" if any(s["kind"] == "evals" for s in series) else ""
    what = ("training score" if row.normalize else "training return") + dotted if curves else "evaluation"
    ax.set_ylabel(f"{what}{' (D4RL normalised score)' if row.normalize and not curves else ''}", fontsize="small")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    path = out / f"{row.name}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _offline_steps(row: Row) -> int:
    """The offline phase of an offline-to-online row (its preset's ``offline_steps``, the row's ``config`` variant
    layered on it); 0: none."""
    from rapidrl.runs.config import parse_set, preset_path, read_toml

    steps = None
    for path in (preset_path(row.algo, row.env), row.config_path()):
        if path is not None and path.is_file():
            steps = read_toml(path).get("algo", {}).get("offline_steps", steps)
    for section, key, value in map(parse_set, row.sets):
        if (section, key) == ("algo", "offline_steps"):
            steps = value
    return int(steps or 0)


def write_page(out: Path, title_note: str = "") -> Path:
    """``out/../RESULTS.md`` (``docs/RESULTS.md`` for the default ``out``): one table per family."""
    page = out.parent / RESULTS_MD
    image_dir = out.relative_to(out.parent).as_posix()
    lines = ["# Learning results", "",
             "Each row trains the shipped preset of its algorithm and task (`rapidrl/configs`) from the command line, "
             "one seed per process, on the 2-core development machine (no GPU), often beside other jobs: "
             "wall-clock is an upper bound of what an idle machine takes. Reproduce a row with "
             f"`{COMMAND} ROW` (`{COMMAND} list` names them); `--quick` runs a short "
             "version of every row. The numbers below are read from `docs/results/<row>.csv`, which the command "
             "appends to. A seed interrupted mid-run (a closed session, a kill) resumes from its last checkpoint "
             "when the row is run again; its wall-clock adds up the parts. A seed not finished yet is marked "
             "`(in progress)`, with how far it has got under its table and its curve so far.", "",
             "**eval**: mean ± std over seeds of each seed's final evaluation (10 deterministic episodes unless "
             "the preset sets `eval_episodes`, raw rewards). **train**: mean ± std over seeds of the mean return "
             "of the last 20 training episodes (stochastic policy), the figure CleanRL reports. "
             "**wall**: training wall-clock of one seed (the final evaluation not included), mean over seeds; a "
             "run paused (SIGSTOP) while other jobs had the machine has the pause subtracted, as its note says.", ""]
    if title_note:
        lines += [title_note, ""]
    families: dict[str, list[Row]] = {}
    for row in ROWS.values():
        families.setdefault(row.family, []).append(row)
    for family, rows in families.items():
        lines += [f"## {family}", "",
                  "| row | task | algo | budget | seeds | eval | train | published | wall | curve |",
                  "|---|---|---|---:|---|---:|---:|---|---:|---|"]
        for row in rows:
            results = _read_csv(out / f"{row.name}.csv")
            unfinished = _read_csv(out / f"{row.name}-progress.csv")
            seeds = ", ".join([r["seed"] for r in results] + [f"{r['seed']} (in progress)" for r in unfinished]) \
                or "not run yet"
            budget = {int(r["timesteps"]) for r in results} or {row.timesteps}
            evals = [float(r["eval_mean"]) for r in results]
            score = ""
            if row.normalize and evals:
                random, expert = row.normalize
                score = f"<br>score {_stats([100 * (e - random) / (expert - random) for e in evals])}"
            score += "".join(_extra_eval(row, label, results) for label, _ in row.evals)
            trains = [float(r["train_return"]) for r in results if r["train_return"]]
            wall = f"{np.mean([float(r['wall_s']) for r in results]):.0f} s" if results else "-"
            published = "<br>".join(p.text() for p in row.published) or "-"
            curve = f"![{row.name}]({image_dir}/{row.name}.png)" if (out / f"{row.name}.png").is_file() else "-"
            lines.append(f"| `{row.name}` | {row.env} | {row.algo.upper()} | {', '.join(f'{b:,}' for b in budget)} "
                         f"| {seeds} | {_stats(evals)}{score} | {_stats(trains)} | {published} | {wall} | {curve} |")
        notes = [f"- `{row.name}`: {row.notes}" for row in rows if row.notes]
        notes += [f"- `{row.name}`: {row.pending}" for row in rows if row.pending and not
                  (out / f"{row.name}.csv").is_file() and not (out / f"{row.name}-progress.csv").is_file()]
        notes += [_progress_note(row, r) for row in rows for r in _read_csv(out / f"{row.name}-progress.csv")]
        lines += ["", *notes, ""] if notes else [""]
        for row in rows:
            if row.solve is not None:
                lines += _solve_table(row, out)
    page.write_text("\n".join(lines))
    return page


def _extra_eval(row: Row, label: str, results: list[dict]) -> str:
    """The eval cell's line of one of ``row.evals`` over the recorded seeds: mean ± std, or (``row.outcomes``) the
    mean win / draw / loss rates."""
    runs = [(float(r[f"eval[{label}]"]), float(r[f"eval[{label}]_std"])) for r in results if r.get(f"eval[{label}]")]
    if not runs:
        return ""
    if not row.outcomes:
        return f"<br>{label}: {_stats([m for m, _ in runs])}"
    win, draw, loss = np.mean([outcome_rates(m, s) for m, s in runs], axis=0)
    return f"<br>{label}: won {100 * win:.1f}%, drew {100 * draw:.1f}%, lost {100 * loss:.1f}%"


def _progress_note(row: Row, r: dict) -> str:
    train = f", training return {float(r['train_return']):.1f} (last 20 episodes)" if r["train_return"] else ""
    wall = f" after {float(r['wall_s']):,.0f} s of training" if r["wall_s"] else ""
    return (f"- `{row.name}` seed {r['seed']}: **in progress**: {int(r['steps']):,} of {int(r['budget']):,} steps"
            f"{wall}{train} (recorded {r['date_utc']}, commit {r['commit']}; no evaluation until it ends); its curve "
            f"so far is drawn. `{continue_command(row.name, r.get('run_dir'))}` "
            "continues it from its run directory's last checkpoint.")


def _solve_table(row: Row, out: Path) -> list[str]:
    """The steps and wall-clock to solve of each seed of a row with a solve criterion, and of its peer's runs."""
    mine = _read_csv(out / f"{row.name}.csv")
    peer = _read_csv(out / f"{row.peer}.csv") if row.peer else []
    if not mine and not peer:
        return []
    lines = [f"### `{row.name}`: steps and wall-clock to solve ({row.env}, evaluation >= {row.solve:g})", "",
             f"Every {row.eval_every:,} steps a checkpoint is evaluated ({mine[0]['eval_episodes'] if mine else 10} "
             "deterministic episodes, raw rewards, as `rapidrl eval`). **solved at**: the first evaluation that "
             "reaches the criterion, and the training wall-clock up to it (evaluations not counted). **stays solved "
             "from**: the first evaluation from which every later one reaches it. **final eval**: the model at the "
             "end of the budget.", "",
             "| library | task | seed | budget | solved at (steps) | wall-clock to solve | stays solved from | "
             "final eval | whole run |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def cells(r: dict) -> str:
        solved = r.get("solve_step") not in ("", None)
        steps = f"{int(float(r['solve_step'])):,}" if solved else "not solved"
        wall = f"{float(r['solve_wall_s']):.1f} s" if solved else "-"
        stable = f"{int(float(r['stable_step'])):,}" if r.get("stable_step") not in ("", None) else \
            "not at the end" if solved else "-"
        return f"{steps} | {wall} | {stable} | {float(r['eval_mean']):.1f} | {float(r['wall_s']):.0f} s |"

    for r in mine:
        lines.append(f"| rapidrl {r['commit']} | {row.env} (built-in) | {r['seed']} | {int(r['timesteps']):,} | "
                     f"{cells(r)}")
    for r in peer:
        lines.append(f"| {r['library']} | {r['task']} | {r['seed']} | {int(r['timesteps']):,} | {cells(r)}")
    if peer and peer[0].get("setting"):
        lines += ["", f"{row.peer}: {peer[0]['setting']}"]
    return [*lines, ""]


# -- command line -----------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    if argv[:1] == ["datasets"]:  # the offline rows' datasets, rebuilt from their committed sources
        from tools.dataset_sources import main as datasets_main

        return datasets_main(["rebuild", *argv[1:]])
    p = argparse.ArgumentParser(prog=COMMAND,
                                description="Learning results at the standard budgets (docs/RESULTS.md).")
    p.add_argument("rows", nargs="*", help="row names, or 'list' (default with --quick or --progress: every row)")
    p.add_argument("--seeds", default=None, help="seeds to run, e.g. 0-2 (default: the row's)")
    p.add_argument("--quick", action="store_true", help="short budgets, first seed only, into --out")
    p.add_argument("--out", default=None, help="directory of the CSVs and images (default docs/results, "
                                                 "or bench_results/results-quick with --quick)")
    p.add_argument("--runs-root", default=str(RUNS_ROOT), help="where the run directories go")
    p.add_argument("--progress", action="store_true", help="train nothing: record how far the rows' unfinished "
                                                           "runs (running or stopped) have got, redraw the page")
    args = p.parse_args(argv)
    if args.rows == ["list"]:
        for row in ROWS.values():
            pub = "; ".join(x.text() for x in row.published) or "-"
            print(f"{row.name:24s} {row.algo} {row.env}, {row.timesteps:,} steps, seeds {list(row.seeds)}: {pub}")
        return 0
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown or (not args.rows and not args.quick and not args.progress):
        print(f"rapidrl: error: name rows ({', '.join(ROWS)}), 'list', --quick or --progress"
              + (f"; unknown: {', '.join(unknown)}" if unknown else ""), file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (Path("bench_results/results-quick") if args.quick else DOCS / "results")
    rows = [ROWS[r] for r in args.rows] or list(ROWS.values())
    if args.seeds is not None:
        from rapidrl.runs.experiment import parse_seeds

        seeds = tuple(parse_seeds(args.seeds))
    title = "Quick version (short budgets, one seed): a check of the pipeline, not results." if args.quick else ""
    runs_root = Path(args.runs_root)
    try:
        for row in rows:
            chosen = seeds if args.seeds is not None else (row.seeds[:1] if args.quick else row.seeds)
            if args.progress:
                progress_row(row, chosen, out, runs_root, quick=args.quick)
                continue
            try:
                run_row(row, chosen, out, runs_root, quick=args.quick)
            except SeedNotFinished as e:
                if e.code == 130:  # its progress was recorded: the page shows it
                    write_page(out, title)
                print(f"rapidrl: {'stopped' if e.code == 130 else 'error'}: {e}", file=sys.stderr)
                return 130 if e.code == 130 else 1
        page = write_page(out, title)
    except RunDirError as e:  # a hand-edited progress CSV: name the file, no traceback
        print(f"rapidrl: error: {e} (the run_dir column of {out / (e.row_name + '-progress.csv')})", file=sys.stderr)
        return 2
    print(f"results page: {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


"""Benchmark harness: interleaved repeats, medians with bootstrap intervals, JSON and markdown output.

A ``Case`` holds one callable per contender (``rapidrl`` and each installed peer). ``measure`` runs

1. each contender's optional ``setup`` once (filling a buffer, compiling a kernel),
2. ``warmup`` untimed calls per contender,
3. a calibration of ``inner`` per contender so one timed repeat lasts at least ``target_ns``,
4. ``repeats`` rounds; in each round every contender is timed once (``inner`` calls between two
   ``perf_counter_ns`` reads). The order rotates each round (round ``r`` starts at contender ``r mod
   k``), so slow phases of a noisy, shared machine hit every contender alike and none is always first.

Per contender it reports the median per-call time and a bootstrap 95% interval of that median. Against
the baseline contender (``rapidrl``) it reports the speedup ``median(peer) / median(rapidrl)`` with a
*paired* bootstrap interval: round ``r`` of every contender ran within the same few milliseconds, so
the same resampled rounds are used for numerator and denominator.

A timing is never asserted in a unit test; ``tests/test_bench_harness.py`` checks the statistics with
an injected clock.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rapidrl._system import cpu_model

BASELINE = "rapidrl"
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
TARGET_REPEAT_NS = 3_000_000  # one timed repeat lasts at least ~3 ms
MAX_INNER = 1_000_000
CASE_BUDGET_NS = 60_000_000_000  # timed rounds of one case stop growing past ~60 s ...
MIN_REPEATS = 7  # ... but at least this many rounds are run

# peer name (as used by ``--against`` and as contender-name prefix) -> importable module
PEER_MODULES = {
    "rlox": "rlox",
    "sb3": "stable_baselines3",
    "torchrl": "torchrl",
    "gymnasium": "gymnasium",
    "torch": "torch",
    "numpy": "numpy",
    "trl": "trl",
    "minatar": "minatar",
    "ale_py": "ale_py",
    "envpool": "envpool",
    "mujoco": "mujoco",
    "mpe2": "mpe2",
    "supersuit": "supersuit",
}
# how to install each peer (shown when a peer is skipped); `pip install 'rapidrl[bench]'` installs them all
PEER_PIP = {"rlox": "rlox", "sb3": "stable-baselines3", "torchrl": "torchrl", "trl": "trl",
            "minatar": "minatar==1.0.15 --no-deps", "ale_py": "ale-py", "envpool": "envpool",
            "mujoco": "mujoco", "mpe2": "mpe2", "supersuit": "supersuit"}
PEER_ALIASES = {"stable-baselines3": "sb3", "stable_baselines3": "sb3", "gym": "gymnasium"}
# distributions whose versions go into the machine record
VERSIONED = ["rapidrl", "numpy", "numba", "torch", "gymnasium", "rlox", "stable-baselines3", "torchrl", "minatar",
             "mujoco"]


@dataclass
class Case:
    """One benchmark: the same work done by several contenders.

    Attributes:
        name: unique id shown in tables, e.g. ``"gae/f32/64x128"``.
        contenders: contender name -> zero-argument callable doing the work once. Names are
            ``"rapidrl"`` or ``"<peer>"`` / ``"<peer>/<variant>"`` (``"gymnasium/sync"``); the part before
            ``/`` is the peer that ``--against`` filters on.
        setup: contender name -> callable run once before that contender's warm-up (optional).
        params: sizes and settings, copied into the JSON record.
        items_per_call: work items per call (env steps, transitions) for a throughput column, or None.
        item_unit: name of one work item (``"steps"``).
        baseline: contender the speedups are computed against.
        teardown: callables run once after the case (closing envs and their subprocesses).
        notes: free-text remarks (skipped contenders, layout conversions, mismatches).
    """

    name: str
    contenders: dict[str, Callable[[], Any]]
    setup: dict[str, Callable[[], Any]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    items_per_call: float | None = None
    item_unit: str = "items"
    baseline: str = BASELINE
    teardown: list[Callable[[], Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add_env(self, name: str, env, actions, *, reset: bool = True) -> None:
        """Contender ``name`` steps the vector env ``env`` with ``actions`` (reset first with seed 0 unless ``reset``
        is False), closed at teardown."""
        if reset:
            env.reset(seed=0)
        self.contenders[name] = lambda: env.step(actions)
        self.teardown.append(env.close)


@dataclass
class Result:
    """Timings of one case. Times are nanoseconds per call; ``samples_ns[c]`` has one entry per repeat."""

    case: Case
    samples_ns: dict[str, np.ndarray]
    inner: dict[str, int]
    order: list[list[str]]
    stats: dict[str, dict[str, float]]
    ratios: dict[str, dict[str, float]]
    failed: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready record (see README for the schema)."""
        c = self.case
        return {
            "name": c.name,
            "params": c.params,
            "baseline": c.baseline,
            "items_per_call": c.items_per_call,
            "item_unit": c.item_unit,
            "notes": list(c.notes),
            "failed": dict(self.failed),
            "contenders": {
                name: {
                    **self.stats[name],
                    "inner": self.inner[name],
                    "samples_ns": [float(x) for x in self.samples_ns[name]],
                }
                for name in self.samples_ns
            },
            "speedup": self.ratios,
        }


# ----------------------------------------------------------------------------------------------------
# statistics


def bootstrap_median_ci(
    samples: np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """Median of ``samples`` [R] and the percentile-bootstrap 95% interval of the median."""
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D array, got shape {x.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))  # [B, R]
    meds = np.median(x[idx], axis=1)  # [B]
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(np.median(x)), float(lo), float(hi)


def bootstrap_ratio_ci(
    numerator: np.ndarray,
    denominator: np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float, float]:
    """``median(numerator) / median(denominator)`` and its paired-bootstrap 95% interval.

    Both arrays are [R] timings from the same interleaved rounds; a resample draws rounds, so the
    same round indices are used for both (noise shared within a round cancels in the ratio).
    """
    a = np.asarray(numerator, dtype=np.float64)
    b = np.asarray(denominator, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired samples must be equal-length 1-D arrays, got {a.shape} and {b.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(resamples, a.size))  # [B, R]
    ratios = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)  # [B]
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(np.median(a) / np.median(b)), float(lo), float(hi)


# ----------------------------------------------------------------------------------------------------
# timing


def interleaved_order(names: list[str], repeat: int) -> list[str]:
    """Contender order of round ``repeat``: ``names`` rotated left by ``repeat``."""
    k = repeat % len(names)
    return names[k:] + names[:k]


def timed_learn(learn: Callable[[int], Any], warmup: int, steps: int) -> tuple[float, float]:
    """Seconds of ``learn(warmup)`` (compilation, first allocations, untimed in the rate) and of ``learn(steps)``
    right after it on the same model: a training benchmark's warm-up and timed phase."""
    t0 = time.perf_counter()
    learn(warmup)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    learn(steps)
    return warm, time.perf_counter() - t0


def as_in_learn(model, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` (one update or rollout of rapidrl's ``model``, timed outside ``learn``) run under the process settings
    ``learn`` holds for it (torch threads, denormal flushing, heap and BLAS settings: ``rapidrl.train.runtime``),
    set back after each call, so a peer timed in the same process runs under its own. Without them an update
    outside ``learn`` meets denormals unflushed (SAC's update 5.4 -> 22.7 ms on an Intel Xeon)."""
    settings = model._process_settings

    def call():
        with settings():
            return fn()

    return call


def _time_calls(fn: Callable[[], Any], inner: int, clock: Callable[[], int]) -> int:
    """Nanoseconds taken by ``inner`` calls of ``fn``."""
    t0 = clock()
    for _ in range(inner):
        fn()
    return clock() - t0


def calibrate_inner(
    fn: Callable[[], Any], *, target_ns: int, clock: Callable[[], int], max_inner: int = MAX_INNER
) -> int:
    """A call count (growing geometrically from 1) whose total time reaches ``target_ns``."""
    inner = 1
    while inner < max_inner:
        elapsed = _time_calls(fn, inner, clock)
        if elapsed >= target_ns:
            break
        # jump close to the target, at least doubling, at most x100 per step
        guess = inner * target_ns / max(elapsed, 1)
        inner = int(min(max(2 * inner, 1.2 * guess), 100 * inner, max_inner))
    return inner


def measure(
    case: Case,
    *,
    warmup: int = 3,
    repeats: int = 30,
    inner: int | None = None,
    target_ns: int = TARGET_REPEAT_NS,
    clock: Callable[[], int] = time.perf_counter_ns,
    budget_ns: int | None = CASE_BUDGET_NS,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Time every contender of ``case`` in interleaved rounds; see the module docstring.

    ``inner=None`` calibrates the calls per repeat per contender; an int fixes it for all. If the first
    round shows that ``repeats`` rounds would exceed ``budget_ns`` (clock units), the number of rounds
    is lowered to fit, but not below ``MIN_REPEATS`` (the JSON records the repeats actually run). A
    contender whose setup or warm-up raises is dropped and listed in ``Result.failed``; it never stops
    the case. The garbage collector stays on: a contender that allocates pays for its collections.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    failed: dict[str, str] = {}
    live: dict[str, Callable[[], Any]] = {}
    inners: dict[str, int] = {}
    for name, fn in case.contenders.items():
        try:
            if name in case.setup:
                case.setup[name]()
            for _ in range(warmup):
                fn()
            inners[name] = inner if inner is not None else calibrate_inner(fn, target_ns=target_ns, clock=clock)
        except Exception as exc:  # a broken peer must not stop the suite
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        live[name] = fn
    names = list(live)
    samples = {n: np.empty(repeats, dtype=np.float64) for n in names}
    orders: list[list[str]] = []
    r = 0
    while names and r < repeats:  # no contender left (every one failed): nothing to time
        if progress is not None and names and (r % max(1, repeats // 4) == 0):
            progress(f"{case.name}: repeat {r + 1}/{repeats}")
        order = interleaved_order(names, r)
        orders.append(order)
        t_round = clock()
        for n in order:
            samples[n][r] = _time_calls(live[n], inners[n], clock) / inners[n]
        r += 1
        if r == 1 and budget_ns is not None:  # slow case: fewer rounds, never fewer than MIN_REPEATS
            fit = budget_ns // max(clock() - t_round, 1)
            repeats = max(min(repeats, MIN_REPEATS), min(repeats, int(fit)))
    samples = {n: x[:repeats] for n, x in samples.items()}
    stats = {}
    for n in names:
        med, lo, hi = bootstrap_median_ci(samples[n])
        stats[n] = {"median_ns": med, "ci_low_ns": lo, "ci_high_ns": hi}
        if case.items_per_call:
            stats[n]["items_per_s"] = case.items_per_call * 1e9 / med
    ratios = {}
    if case.baseline in samples:
        base = samples[case.baseline]
        for n in names:
            if n != case.baseline:
                s, lo, hi = bootstrap_ratio_ci(samples[n], base)
                ratios[n] = {"speedup": s, "ci_low": lo, "ci_high": hi}
    return Result(case, samples, {n: inners[n] for n in names}, orders, stats, ratios, failed)


# ----------------------------------------------------------------------------------------------------
# peers and context


def peer_of(contender: str) -> str:
    """Peer a contender belongs to: the part of its name before ``/``."""
    return contender.split("/", 1)[0]


def parse_against(spec: str | None) -> set[str] | None:
    """``"rlox,sb3"`` -> ``{"rlox", "sb3"}`` (aliases resolved); None or ``"all"`` -> None (no filter)."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return None
    out = set()
    for part in spec.split(","):
        p = part.strip().lower()
        if p:
            out.add(PEER_ALIASES.get(p, p))
    unknown = out - set(PEER_MODULES)
    if unknown:
        raise ValueError(f"unknown peer(s) {sorted(unknown)}; known: {sorted(PEER_MODULES)}")
    return out


class Context:
    """What a suite needs to build its cases: quick mode, the peer filter, and peer imports.

    ``peer(name)`` returns the imported module or None; a peer that is filtered out or not importable
    is recorded in ``skipped`` (peer -> reason) so the report can say which peers were left out;
    a case that could not run at all goes into ``skipped_cases`` (case -> reason).
    """

    def __init__(self, *, quick: bool = False, against: set[str] | None = None, importer=None,
                 precisions: tuple[str, ...] = ()):
        self.quick = quick
        self.against = against
        self.precisions = tuple(precisions)
        """Extra rapidrl contenders of the end-to-end suites: ``rapidrl/<precision>`` (``--precision bf16``)."""
        self.skipped: dict[str, str] = {}
        self.skipped_cases: dict[str, str] = {}
        self._importer = importer or importlib.import_module
        self._modules: dict[str, Any] = {}

    def wants(self, peer: str) -> bool:
        """True if ``peer`` passes the ``--against`` filter (the baseline always does)."""
        return peer == BASELINE or self.against is None or peer in self.against

    def peer(self, name: str):
        """The module of peer ``name`` if it is wanted and importable, else None (reason recorded)."""
        if not self.wants(name):
            self.skipped.setdefault(name, "not in --against")
            return None
        if name in self._modules:
            return self._modules[name]
        module = PEER_MODULES.get(name, name)
        try:
            mod = self._importer(module)
        except ModuleNotFoundError:
            self.skipped[name] = f"not installed: pip install {PEER_PIP.get(name, name)}"
            mod = None
        except Exception as exc:  # a peer that fails on import
            self.skipped[name] = f"not importable ({type(exc).__name__}: {exc})"
            mod = None
        self._modules[name] = mod
        return mod

    def rapidrl_contenders(self) -> list[str]:
        """"rapidrl" and one "rapidrl/<precision>" per ``--precision`` value (end-to-end suites)."""
        return ["rapidrl"] + [f"rapidrl/{p}" for p in self.precisions]

    def rapidrl(self, dotted: str):
        """Attribute ``dotted`` (e.g. ``"kernels.gae"``) of rapidrl, or None while it does not exist yet."""
        obj: Any
        try:
            obj = importlib.import_module("rapidrl")
            for part in dotted.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            return None
        return obj


def rapidrl_precision(lib: str) -> str | None:
    """The ``precision`` setting of an end-to-end contender name: "rapidrl" -> "fp32", "rapidrl/bf16" -> "bf16";
    None for a peer."""
    if lib == "rapidrl":
        return "fp32"
    if lib.startswith("rapidrl/"):
        return lib.split("/", 1)[1]
    return None


def filter_contenders(case: Case, ctx: Context) -> Case:
    """Drop contenders whose peer is not wanted by ``ctx`` (rapidrl and the baseline always stay)."""
    keep = {n: f for n, f in case.contenders.items() if n == case.baseline or ctx.wants(peer_of(n))}
    case.contenders = keep
    return case


# ----------------------------------------------------------------------------------------------------
# machine record


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """CPU, core count, Python and library versions, thread settings and the UTC date."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {d: _version(d) for d in VERSIONED},
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    # thread counts of the libraries the run actually imported (importing torch here would cost ~2 s)
    torch, numba = sys.modules.get("torch"), sys.modules.get("numba")
    info["torch_threads"] = torch.get_num_threads() if torch is not None else None
    info["numba_threads"] = numba.get_num_threads() if numba is not None else None
    return info


# ----------------------------------------------------------------------------------------------------
# output


def format_time(ns: float) -> str:
    """Human time: ``"812 ns"``, ``"37.2 µs"``, ``"1.27 ms"``, ``"2.10 s"``."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if ns >= scale:
            v = ns / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{ns:.0f} ns"


def format_rate(per_s: float, unit: str) -> str:
    """Human throughput: ``"6.01 M steps/s"``."""
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {prefix} {unit}/s"
    return f"{per_s:.3g} {unit}/s"


def markdown_table(results: Iterable[Result]) -> str:
    """One markdown table: case, contender, median, 95% CI, throughput, speedup of the baseline."""
    lines = [
        "| case | contender | median | 95% CI | throughput | speedup of baseline (95% CI) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for res in results:
        c = res.case
        for n, st in res.stats.items():
            rate = format_rate(st["items_per_s"], c.item_unit) if "items_per_s" in st else ""
            ci = f"{format_time(st['ci_low_ns'])} - {format_time(st['ci_high_ns'])}"
            if n == c.baseline:
                sp = "(baseline)"
            elif n in res.ratios:
                r = res.ratios[n]
                sp = f"**{r['speedup']:.2f}x** ({r['ci_low']:.2f}-{r['ci_high']:.2f})"
            else:
                sp = "—"
            lines.append(f"| {c.name} | {n} | {format_time(st['median_ns'])} | {ci} | {rate} | {sp} |")
        for n, why in res.failed.items():
            lines.append(f"| {c.name} | {n} | failed | {why[:80].replace('|', '/')} | | |")
    return "\n".join(lines)


def report_markdown(
    suite: str,
    results: list[Result],
    machine: dict,
    skipped: dict[str, str],
    skipped_cases: dict[str, str] | None = None,
) -> str:
    """Full markdown report of a suite: machine line, table, skipped peers and cases, case notes."""
    baseline = results[0].case.baseline if results else BASELINE
    v = machine.get("versions", {})
    vers = ", ".join(f"{k} {val}" for k, val in v.items() if val)
    out = [
        f"## rapidrl bench: {suite}",
        "",
        f"{machine.get('cpu')}, {machine.get('cores')} cores, Python {machine.get('python')}, "
        f"torch threads {machine.get('torch_threads')}, numba threads {machine.get('numba_threads')}; "
        f"{vers}; {machine.get('date_utc')}",
    ]
    if results:  # suites of end-to-end runs only (their tables come from ``extras``) have no micro-benchmarks
        out += [
            "",
            f"Speedup = median(contender) / median(baseline), paired bootstrap 95% CI; > 1 means the baseline "
            f"({baseline}) is faster.",
            "",
            markdown_table(results),
        ]
    if skipped:
        out += ["", "Skipped peers: " + "; ".join(f"{k} ({why})" for k, why in sorted(skipped.items()))]
    if skipped_cases:
        out += ["", "Skipped cases: " + "; ".join(f"{k} ({why})" for k, why in skipped_cases.items())]
    notes = [(r.case.name, n) for r in results for n in r.case.notes]
    if notes:
        out += ["", "Notes:", *[f"- {name}: {n}" for name, n in notes]]
    return "\n".join(out) + "\n"


def rows_markdown(title: str, rows: list[dict[str, Any]]) -> str:
    """A titled markdown table of ``rows`` (dicts with the same keys), for a suite's extra figures."""
    if not rows:
        return ""
    keys = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def suite_json(
    suite: str,
    results: list[Result],
    machine: dict,
    skipped: dict[str, str],
    skipped_cases: dict[str, str] | None = None,
    **settings,
) -> dict:
    """JSON document of one suite run (schema in benchmarks/README.md)."""
    return {
        "schema": "rapidrl-bench/1",
        "suite": suite,
        "machine": machine,
        "settings": settings,
        "skipped_peers": dict(skipped),
        "skipped_cases": dict(skipped_cases or {}),
        "cases": [r.to_json() for r in results],
    }


def write_outputs(out_dir: Path, suite: str, doc: dict, markdown: str) -> tuple[Path, Path]:
    """Write ``<suite>.json`` and ``<suite>.md`` into ``out_dir`` (created if needed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jp, mp = out_dir / f"{suite}.json", out_dir / f"{suite}.md"
    jp.write_text(json.dumps(doc, indent=1))
    mp.write_text(markdown)
    return jp, mp


def run_cases(
    cases: Iterator[Case],
    ctx: Context,
    *,
    warmup: int,
    repeats: int,
    progress: Callable[[str], None] | None = None,
    baseline: str | None = None,
    name_filter: str | None = None,
) -> list[Result]:
    """Filter and measure each case as it is built (``baseline`` overrides every case's baseline;
    only cases whose name contains ``name_filter`` run).

    A case without its baseline contender is skipped (recorded in ``ctx.skipped_cases``). After a case
    is measured its teardown runs and its callables are released, so only one case's buffers and envs
    are alive at a time.
    """
    results = []
    for case in cases:
        try:
            if baseline is not None:
                case.baseline = baseline
            if name_filter and name_filter not in case.name:
                continue
            filter_contenders(case, ctx)
            if case.baseline not in case.contenders:
                ctx.skipped_cases[case.name] = f"no {case.baseline} contender"
                if progress:
                    progress(f"{case.name}: skipped (no {case.baseline} contender)")
                continue
            if progress:
                progress(f"{case.name}: {', '.join(case.contenders)}")
            results.append(measure(case, warmup=warmup, repeats=repeats, progress=progress))
        finally:
            for close in case.teardown:
                close()
            case.contenders.clear()
            case.setup.clear()
            case.teardown.clear()
    return results

"""Command line of the benchmark suite: ``python -m rapidrl.benchmarks.run kernels [--quick] [--against rlox]``.

``rapidrl bench ...`` calls ``main(argv)`` with the same arguments. Each suite is a module with a
``cases(ctx) -> Iterator[Case]`` function, optionally ``REPEATS = {"quick": r, "full": r}`` and
``extras(ctx) -> (title, rows)`` for figures that are not timings (memory per env); registering a new
suite is one line in ``SUITES``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from rapidrl.benchmarks.harness import (
    Context,
    machine_info,
    parse_against,
    report_markdown,
    rows_markdown,
    run_cases,
    suite_json,
    write_outputs,
)

# suite name -> module defining cases(ctx)
SUITES = {
    "kernels": "rapidrl.benchmarks.bench_kernels",
    "envs": "rapidrl.benchmarks.bench_envs",
    "buffers": "rapidrl.benchmarks.bench_buffers",
    "train": "rapidrl.benchmarks.bench_train",
    "llm": "rapidrl.benchmarks.bench_llm",
    "scale": "rapidrl.benchmarks.bench_scale",
    "offpolicy": "rapidrl.benchmarks.bench_offpolicy",
    "minatar": "rapidrl.benchmarks.bench_minatar",
    "mujoco": "rapidrl.benchmarks.bench_mujoco",
    "pixels": "rapidrl.benchmarks.bench_pixels",
    "marl": "rapidrl.benchmarks.bench_marl",
    "recurrent": "rapidrl.benchmarks.bench_recurrent",
    "custom": "rapidrl.benchmarks.bench_custom_env",
    "precision": "rapidrl.benchmarks.bench_precision",
    "offline": "rapidrl.benchmarks.bench_offline",
    "continuous": "rapidrl.benchmarks.bench_continuous",
    "her": "rapidrl.benchmarks.bench_her",
    "pqn": "rapidrl.benchmarks.bench_pqn",
    "value_dist": "rapidrl.benchmarks.bench_value_dist",
    "masks": "rapidrl.benchmarks.bench_masks",
    "threads": "rapidrl.benchmarks.bench_threads",
}

DEFAULT_REPEATS = {"quick": 5, "full": 30}
DEFAULT_WARMUP = {"quick": 1, "full": 3}


def build_parser() -> argparse.ArgumentParser:
    """Argument parser shared by ``python -m rapidrl.benchmarks.run`` and ``rapidrl bench``."""
    p = argparse.ArgumentParser(
        prog="rapidrl bench", description="Benchmark rapidrl against the installed peers (interleaved)."
    )
    p.add_argument("suite", nargs="?", default="all", help=f"one of {', '.join(SUITES)}, or all")
    p.add_argument("--against", default=None, help="comma-separated peers, e.g. rlox,sb3 (default: all)")
    p.add_argument("--quick", action="store_true", help="few repeats: for development, not for reports")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per case (overrides the suite)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls per contender before timing")
    p.add_argument("--filter", default=None, help="run only cases whose name contains this text")
    p.add_argument(
        "--torch-threads", type=int, default=1, help="torch.set_num_threads (default 1; 0 keeps torch's)"
    )
    p.add_argument("--baseline", default="rapidrl", help="contender the speedups are computed against")
    p.add_argument("--precision", default="",
                   help="end-to-end suites (pixels, mujoco, offpolicy): also run rapidrl at these precisions, "
                        "comma-separated (e.g. bf16), as contenders rapidrl/<precision> (rapidrl.train.precision)")
    p.add_argument("--out", default="bench_results", help="directory for <suite>.json and <suite>.md")
    return p


def _console():
    from rich.console import Console

    return Console(), Console(stderr=True)


def run_suite(name: str, args: argparse.Namespace, against: set[str] | None, out: Path) -> str | None:
    """Run one suite, print its table, write its JSON and markdown; returns the markdown (None if the suite
    is unavailable)."""
    from rich.markdown import Markdown

    console, err = _console()
    try:
        module = importlib.import_module(SUITES[name])
    except ImportError as exc:
        err.print(f"[yellow]suite {name!r} is not available: {exc}[/yellow]")
        return None
    mode = "quick" if args.quick else "full"
    repeats = args.repeats or getattr(module, "REPEATS", DEFAULT_REPEATS)[mode]
    warmup = args.warmup if args.warmup is not None else DEFAULT_WARMUP[mode]
    ctx = Context(quick=args.quick, against=against,
                  precisions=tuple(p for p in getattr(args, "precision", "").split(",") if p))
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        err.print(f"[dim]{time.perf_counter() - t0:7.1f}s[/dim] {msg}", highlight=False)

    results = run_cases(
        module.cases(ctx), ctx, warmup=warmup, repeats=repeats, progress=progress,
        baseline=args.baseline, name_filter=args.filter,
    )  # fmt: skip
    extra = None
    if hasattr(module, "extras") and not args.filter:
        progress("extras")
        title, rows = module.extras(ctx)
        extra = {"title": title, "rows": rows}
    machine = machine_info()
    md = report_markdown(name, results, machine, ctx.skipped, ctx.skipped_cases)
    if extra:
        md += "\n" + rows_markdown(extra["title"], extra["rows"])
    doc = suite_json(
        name, results, machine, ctx.skipped, ctx.skipped_cases,
        quick=args.quick, repeats=repeats, warmup=warmup, against=sorted(against) if against else None,
    )  # fmt: skip
    doc["extras"] = extra
    if console.is_terminal:
        console.print(Markdown(md))
    else:  # piped or logged: the plain markdown, not wrapped to 80 columns
        console.print(md, markup=False, highlight=False, soft_wrap=True)
    jp, mp = write_outputs(out, name, doc, md)
    err.print(f"wrote {jp} and {mp} ({time.perf_counter() - t0:.0f}s)")
    return md


def write_report(out: Path, argv: list[str], sections: dict[str, str]) -> Path:
    """``OUT/BENCHMARKS.md``: the command, the machine and versions, then every suite's tables of this run."""
    machine = machine_info()
    versions = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)
    lines = ["# rapidrl benchmarks", "",
             f"Reproduce: `rapidrl bench {' '.join(argv)}` ({machine.get('date_utc')}).", "",
             f"Machine: {machine.get('cpu')}, {machine.get('cores')} cores, Python {machine.get('python')}; "
             f"{versions}.", "",
             "Micro-benchmarks interleave the contenders in one process; end-to-end training runs each contender "
             "in its own fresh process at 1 torch thread and at all cores (`rapidrl.benchmarks.isolated`). "
             "Ratios are measured in the same run; warm-up is excluded and reported apart.", ""]
    for name, md in sections.items():
        lines += [md.replace(f"## rapidrl bench: {name}", f"## {name}"), ""]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "BENCHMARKS.md"
    path.write_text("\n".join(lines))
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 on bad arguments or an unknown suite)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "results":  # learning results are repository tooling, not a timing of the package
        print("rapidrl bench: the learning results (docs/RESULTS.md) are repository tooling, not part of the "
              "package: from a rapidrl checkout run `python -m tools.results " + " ".join(argv[1:] or ["list"])
              + "` (tools/results/README.md)", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suite != "all" and args.suite not in SUITES:
        parser.print_usage(sys.stderr)
        print(f"unknown suite {args.suite!r}; choose from {', '.join(SUITES)}, all", file=sys.stderr)
        return 2
    try:
        against = parse_against(args.against)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    bad = [p for p in args.precision.split(",") if p and p not in ("fp32", "bf16", "auto")]
    if bad:
        print(f"--precision takes fp32, bf16 or auto, got {', '.join(bad)}", file=sys.stderr)
        return 2
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    names = list(SUITES) if args.suite == "all" else [args.suite]
    sections = {n: md for n in names if (md := run_suite(n, args, against, Path(args.out))) is not None}
    if sections:
        report = write_report(Path(args.out), argv, sections)
        print(f"report: {report}", file=sys.stderr)
    ok = [n in sections for n in names]
    return 0 if all(ok) or (args.suite == "all" and any(ok)) else 1


if __name__ == "__main__":
    sys.exit(main())

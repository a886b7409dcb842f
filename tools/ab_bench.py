"""Before/after: one benchmark suite on two checkouts of rapidrl, alternating fresh processes, in one run.

    python tools/ab_bench.py --a ../wt-base --b . --suite envs --filter cartpole_step --rounds 3

Each round runs the suite (``rapidrl.benchmarks.run``) once in a fresh process on checkout A, then once on B (the
order alternates between rounds), so machine noise hits both alike. Each side runs from a neutral working directory
with only its own checkout on ``PYTHONPATH`` and reports the ``rapidrl`` it imported; a side that imported another
tree is refused (``tools/trees.py``: started from the repository root, the old invocation compared HEAD with HEAD).
Every run measures the peers too, so each side has its own rapidrl/peer ratio from the same process; the table
gives, per case, the median per-call time of rapidrl on each side over the rounds, B's speedup over A, and each
side's median speedup against every peer. ``--python`` picks the interpreter (one with the peers installed).
A suite's ``extras`` rows (end-to-end runs: the train suite has nothing else) follow in a second table: per row
(its case, contender and torch threads) and per numeric column, each side's median and B's value over A's
(higher is better for SPS, lower for seconds and ms).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: tools/ab_bench.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.trees import imported_from, run_in_tree


def run_side(python: str, checkout: Path, suite: str, extra: list[str], out: Path, **kw) -> dict:
    """One side's run of ``suite`` on ``checkout`` (``tools.trees.run_in_tree``: neutral directory, import checked);
    its JSON document with ``"rapidrl_file"``, the rapidrl it imported, added. ``kw``: passed to run_in_tree."""
    out = out.resolve()
    proc = run_in_tree(python, checkout, "rapidrl.benchmarks.run:main", [suite, "--out", str(out), *extra], **kw)
    doc = json.loads((out / f"{suite}.json").read_text())
    doc["rapidrl_file"] = str(imported_from(proc.stdout))
    return doc


# extras columns that name a row (torch threads without its " (best)" mark), and columns that are not timings
ROW_KEYS = ("case", "run", "contender", "library", "torch threads", "num_envs")
NOT_TIMINGS = ("phases", "eval mean per seed", "eval_return")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extras_table(docs: dict[str, list[dict]]) -> list[str]:
    """Markdown lines comparing the sides' ``extras`` rows: one line per row and numeric column."""
    values: dict[tuple, dict[str, list[float]]] = {}
    for label in ("A", "B"):
        for doc in docs[label]:
            for row in (doc.get("extras") or {}).get("rows", []):
                key = " / ".join(str(row[k]).replace(" (best)", "") for k in ROW_KEYS if k in row)
                for col, val in row.items():
                    found = NUMBER.search(str(val)) if col not in ROW_KEYS + NOT_TIMINGS and val is not None else None
                    if found:
                        values.setdefault((key, col), {"A": [], "B": []})[label].append(
                            float(found.group().replace(",", "")))
    lines = ["", "| extras row | column | A (median) | B (median) | B/A |", "|---|---|---:|---:|---:|"]
    for (key, col), sides in values.items():
        if sides["A"] and sides["B"]:
            a, b = statistics.median(sides["A"]), statistics.median(sides["B"])
            lines.append(f"| {key} | {col} | {a:,.2f} | {b:,.2f} | {b / a if a else float('nan'):.2f} |")
    return lines if len(lines) > 3 else []


def run_rounds(python: str, sides: dict[str, Path], suite: str, extra: list[str], rounds: int, out: Path,
               **kw) -> dict[str, list[dict]]:
    """``rounds`` runs of ``suite`` per side, alternating which side goes first; label -> the sides' documents."""
    docs: dict[str, list[dict]] = {"A": [], "B": []}
    for r in range(rounds):
        for label in (("A", "B") if r % 2 == 0 else ("B", "A")):
            print(f"round {r + 1}/{rounds}: {label} ({sides[label]})", file=sys.stderr, flush=True)
            docs[label].append(run_side(python, sides[label], suite, extra, out / f"{label}-{r}", **kw))
            print(f"  {label} imported {docs[label][-1]['rapidrl_file']}", file=sys.stderr, flush=True)
    return docs


def case_table(docs: dict[str, list[dict]]) -> list[str]:
    """Markdown lines: per case, each side's median rapidrl time over the rounds, B's speedup over A (A/B: above 1
    is faster), and each side's median speedup against every peer it measured."""
    lines = ["| case | A rapidrl (us) | B rapidrl (us) | B/A speedup | A vs peers | B vs peers |",
             "|---|---:|---:|---:|---|---|"]
    for case in docs["A"][0]["cases"]:
        name = case["name"]
        med, vs = {}, {}
        for label in ("A", "B"):
            runs = [next((c for c in d["cases"] if c["name"] == name), None) for d in docs[label]]
            runs = [c for c in runs if c and "rapidrl" in c["contenders"]]
            if not runs:
                continue
            med[label] = statistics.median(c["contenders"]["rapidrl"]["median_ns"] for c in runs) / 1e3
            peers = sorted({k for c in runs for k in c.get("speedup", {})})
            vs[label] = ", ".join(
                f"{k} {statistics.median(c['speedup'][k]['speedup'] for c in runs if k in c.get('speedup', {})):.2f}x"
                for k in peers)
        if len(med) == 2:
            lines.append(f"| {name} | {med['A']:.2f} | {med['B']:.2f} | {med['A'] / med['B']:.2f}x | {vs['A']} | "
                         f"{vs['B']} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="checkout A (before)")
    p.add_argument("--b", required=True, help="checkout B (after)")
    p.add_argument("--suite", required=True)
    p.add_argument("--filter", default=None)
    p.add_argument("--against", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--out", default="bench_results/ab")
    args = p.parse_args()
    extra = [*(["--filter", args.filter] if args.filter else []),
             *(["--against", args.against] if args.against else []), *(["--quick"] if args.quick else [])]
    sides = {"A": Path(args.a), "B": Path(args.b)}
    docs = run_rounds(args.python, sides, args.suite, extra, args.rounds, Path(args.out))
    for label in ("A", "B"):
        print(f"{label}: {sides[label].resolve()} (rapidrl imported from {docs[label][0]['rapidrl_file']})")
    print()
    print("\n".join(case_table(docs) + extras_table(docs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

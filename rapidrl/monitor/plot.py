"""Learning curves of one or more runs from their metrics.csv (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

from rapidrl.runs.layout import METRICS_CSV, read_csv_metrics

PANELS = (("charts/episodic_return", "episodic return (training)"), ("eval/mean_return", "eval return"),
          ("charts/SPS", "steps per second"))


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Draw return (and eval return, SPS when logged) against env steps, one line per run; save to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {}
    for d in run_dirs:
        path = Path(d) / METRICS_CSV
        if not path.is_file():
            raise FileNotFoundError(f"no {METRICS_CSV} in {d} (is it a run directory?)")
        data[Path(d)] = read_csv_metrics(path)
    panels = [(k, title) for k, title in PANELS if any(_points(cols, k)[0] for cols in data.values())]
    if not panels:
        raise ValueError(f"nothing to plot: no {', '.join(k for k, _ in PANELS)} values in the runs' {METRICS_CSV}")
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), squeeze=False, sharex=True)
    for ax, (key, title) in zip(axes[:, 0], panels):
        for d, cols in data.items():
            xs, ys = _points(cols, key)
            if xs:
                ax.plot(xs, ys, label=d.name)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("env steps")
    axes[0, 0].legend(fontsize="small")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _points(cols: dict[str, list[float]], key: str) -> tuple[list[float], list[float]]:
    steps, values = cols.get("global_step", []), cols.get(key, [])
    pairs = [(x, y) for x, y in zip(steps, values) if math.isfinite(x) and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]

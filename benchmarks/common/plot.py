# SPDX-License-Identifier: Apache-2.0
"""PNG plots of benchmark records: one panel per (op, dtype, ...) and metric,
shapes along x, one line per implementation. matplotlib with the Agg backend
(no display needed); a missing matplotlib raises ImportError with a hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

METRIC_LABELS = {
    "pct_floor": "% of elementwise floor (floor time / time)",
    "pct_ceiling": "% of measured copy ceiling",
    "pct_datasheet": "% of datasheet bandwidth",
    "median_us": "median time per call (us)",
    "gbps": "achieved GB/s",
}
# Reference lines per metric (e.g. the 97%-of-floor target).
REFERENCE_LINES = {"pct_floor": (100.0, 97.0), "pct_ceiling": (100.0,)}


def _as_tuple(x: str | Sequence[str]) -> tuple[str, ...]:
    return (x,) if isinstance(x, str) else tuple(x)


def plot_records(
    records: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    metrics: Sequence[str] = ("pct_floor", "pct_ceiling"),
    panel_fields: str | Sequence[str] = ("op", "dtype"),
    shape_fields: str | Sequence[str] = ("rows", "hidden"),
    series_field: str = "impl",
    highlight: str = "ours",
    exclude_series: Sequence[str] = ("floor",),
    statuses: Sequence[str] = ("ok",),
    title: str | None = None,
    log_y: Sequence[str] = ("median_us",),
) -> Path:
    """Writes a PNG and returns its path. Records without the metric or with
    a status outside `statuses` are left out (the table and JSON say why)."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib (pip install matplotlib)") from e

    panel_fields = _as_tuple(panel_fields)
    shape_fields = _as_tuple(shape_fields)
    recs = [
        r
        for r in records
        if r.get("status") in statuses and r.get(series_field) not in exclude_series
    ]
    panels: list[tuple[Any, ...]] = []
    for r in recs:
        p = tuple(r.get(f) for f in panel_fields)
        if p not in panels:
            panels.append(p)
    if not panels:
        panels = [tuple("none" for _ in panel_fields)]

    # Leave out metrics nobody has (e.g. % of ceiling when none was measured).
    metrics = [m for m in metrics if any(r.get(m) is not None for r in recs)] or list(
        metrics
    )[:1]

    series: list[str] = []
    for r in recs:
        s = str(r.get(series_field))
        if s not in series:
            series.append(s)
    if highlight in series:  # draw ours last, on top
        series.remove(highlight)
        series.append(highlight)

    cmap = plt.get_cmap("tab10")
    colors = {
        s: cmap(i % 10) for i, s in enumerate(x for x in series if x != highlight)
    }
    colors[highlight] = "black"

    nrows, ncols = len(metrics), len(panels)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(max(6.0, 5.5 * ncols), 3.6 * nrows), squeeze=False
    )
    for j, panel in enumerate(panels):
        prec = [r for r in recs if tuple(r.get(f) for f in panel_fields) == panel]
        shapes: list[tuple[Any, ...]] = []
        for r in prec:
            sh = tuple(r.get(f) for f in shape_fields)
            if sh not in shapes:
                shapes.append(sh)
        xs = {sh: i for i, sh in enumerate(shapes)}
        labels = ["x".join(str(v) for v in sh) for sh in shapes]
        for i, metric in enumerate(metrics):
            ax = axes[i][j]
            for s in series:
                pts = sorted(
                    (xs[tuple(r.get(f) for f in shape_fields)], r[metric])
                    for r in prec
                    if str(r.get(series_field)) == s and r.get(metric) is not None
                )
                if not pts:
                    continue
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker="o",
                    markersize=3.5 if s != highlight else 5,
                    linewidth=1.0 if s != highlight else 2.2,
                    color=colors[s],
                    label=s,
                    zorder=3 if s == highlight else 2,
                )
            for y in REFERENCE_LINES.get(metric, ()):
                ax.axhline(y, color="grey", linewidth=0.8, linestyle="--", zorder=1)
            if metric in log_y:
                ax.set_yscale("log")
            elif metric.startswith("pct_"):
                # Percentages live around 0-110; keep a wild outlier from
                # squashing the rest of the panel.
                lo, hi = ax.get_ylim()
                ax.set_ylim(max(0.0, lo), min(hi, 150.0))
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel(METRIC_LABELS.get(metric, metric), fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
            ax.set_title(" ".join(str(p) for p in panel), fontsize=9)
            if i == 0 and j == ncols - 1:
                ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

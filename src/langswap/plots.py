"""Line plots written as PNG (matplotlib, imported only here and only when a plot is drawn)."""

from __future__ import annotations

from pathlib import Path

from langswap.errors import MissingResourceError
from langswap.files import atomic_file


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:  # pragma: no cover - matplotlib is a dependency
        raise MissingResourceError("plots need matplotlib: pip install matplotlib") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def line_plot(path: str | Path, series: dict[str, tuple[list[float], list[float]]], xlabel: str, ylabel: str,
              title: str = "", vlines: list[tuple[float, str]] = (), log_x: bool = False,
              hlines: list[tuple[float, str]] = ()) -> Path:
    """One panel, one line per series (label -> (xs, ys)); see `line_panels`."""
    return line_panels(path, [(ylabel, series)], xlabel, title, vlines, log_x, hlines)


def line_panels(path: str | Path, panels: list[tuple[str, dict[str, tuple[list[float], list[float]]]]],
                xlabel: str, title: str = "", vlines: list[tuple[float, str]] = (), log_x: bool = False,
                hlines: list[tuple[float, str]] = ()) -> Path:
    """Panels side by side, each (y label, {series label: (xs, ys)}), markers on the points; written under a
    temporary name, then renamed. vlines: (x, label) markers such as phase boundaries, drawn on every panel;
    hlines: (y, label) reference levels, dashed and in the legend."""
    plt = _pyplot()
    long_legends = sum(len(series) + len(hlines) > 6 for _, series in panels)
    figure, axes_row = plt.subplots(1, len(panels), figsize=(6.4 * len(panels) + 3.4 * long_legends, 4.2), dpi=110,
                                    squeeze=False)
    for axes, (ylabel, series) in zip(axes_row[0], panels):
        for label, (xs, ys) in series.items():
            axes.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.5, label=label)
        for y, label in hlines:
            axes.axhline(y, color="black", linestyle="--", linewidth=1, label=label)
        for x, label in vlines:
            axes.axvline(x, color="grey", linestyle=":", linewidth=1)
            axes.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color="grey",
                          xytext=(3, -12), textcoords="offset points", rotation=90, va="top")
        if log_x:
            axes.set_xscale("symlog", linthresh=1)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(True, alpha=0.3)
        entries = len(series) + len(hlines)
        if entries > 6:  # a long legend goes beside the panel, not over the lines
            axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        elif entries > 1:
            axes.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    try:
        with atomic_file(path) as temporary:
            figure.savefig(temporary, bbox_inches="tight")
    finally:
        plt.close(figure)
    return path

"""``compare.png``: the chart of ``memstrata experiment compare``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memstrata.memory.extras import require

from .records import RunSummary


def write_chart(runs: Sequence[RunSummary], labels: Sequence[str], path: Path) -> None:
    """``compare.png``: cumulative success curves (left), success and steps bars (right).

    Raises:
        MissingExtraError: matplotlib is not installed (an ImportError; the ``bench`` extra).
    """
    # A Figure on an Agg canvas, not pyplot: no global backend switch, no figure registry.
    require("matplotlib", "bench", "the comparison chart")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for run, name in zip(runs, labels, strict=True):
        curve = run.curve
        left.plot(range(1, len(curve) + 1), curve, label=name)
    left.set(title="cumulative success rate", xlabel="task", ylabel="success rate",
             ylim=(0, 1.02))
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    # Success rate (0-1) and steps (unbounded) need their own y axes.
    steps_axis = right.twinx()
    width = 0.8 / len(runs)
    for n, (run, name) in enumerate(zip(runs, labels, strict=True)):
        colour = f"C{n}"
        right.bar(0 + n * width, run.success_rate, width, color=colour, label=name)
        steps_axis.bar(1 + n * width, run.steps_per_task, width, color=colour)
    middle = width * (len(runs) - 1) / 2
    right.set_xticks([middle, 1 + middle], ["success rate", "steps per task"])
    right.set(ylim=(0, 1.02), ylabel="success rate", title="per run")
    steps_axis.set_ylabel("steps per task")
    right.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)

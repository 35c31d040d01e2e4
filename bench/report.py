"""Results of one experiment and how they are shown: a printed table, a CSV file, a PNG plot.

An experiment returns an :class:`ExperimentResult`: its rows (one dict per measured point, the
CSV columns), the findings it checks against the papers' claims and the issue's targets (each
met, not met, or informational), notes (e.g. why an algorithm was excluded), and a function
that draws its figure. :func:`write_result` turns that into ``<out>/<name>.csv`` and
``<out>/<name>.png`` and :func:`format_result` into the text the CLI prints.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


@dataclass(frozen=True)
class Finding:
    """A claim checked by an experiment: ``met`` is True/False for targets, None if only shown."""

    claim: str
    measured: str
    met: bool | None = None

    def verdict(self) -> str:
        return {True: "MET", False: "NOT MET", None: "info"}[self.met]


@dataclass
class ExperimentResult:
    """Everything one experiment measured, ready to be printed, saved and plotted."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, object]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    draw: Callable[[ExperimentResult], Figure] | None = None

    def add(self, **row: object) -> None:
        missing = set(self.columns) - row.keys()
        extra = row.keys() - set(self.columns)
        if missing or extra:
            raise ValueError(f"row for {self.name}: missing {missing}, unexpected {extra}")
        self.rows.append(row)

    def select(self, **where: object) -> list[dict[str, object]]:
        """Rows whose columns equal all the given values."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in where.items())]

    def value(self, column: str, **where: object) -> float:
        """The ``column`` of the single row matching ``where``."""
        rows = self.select(**where)
        if len(rows) != 1:
            raise LookupError(f"{self.name}: {len(rows)} rows match {where}")
        return float(rows[0][column])  # type: ignore[arg-type]


def format_number(value: object) -> str:
    """Compact human form: integers with thousands separators, floats to 3 significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0 or 0.001 <= abs(value) < 1e6:
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:.3e}"


def format_table(columns: Sequence[str], rows: Sequence[dict[str, object]]) -> str:
    """A fixed-width text table of ``rows`` (numbers right-aligned)."""
    cells = [[format_number(r[c]) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[c], int | float) for r in rows) for c in columns]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    header = line(list(columns))
    return "\n".join([header, "-" * len(header), *(line(row) for row in cells)])


def format_result(result: ExperimentResult) -> str:
    """The text printed for one experiment: title, table, notes, findings."""
    parts = [f"== {result.name}: {result.title}", format_table(result.columns, result.rows)]
    parts += [f"note: {n}" for n in result.notes]
    parts += [f"[{f.verdict()}] {f.claim}: {f.measured}" for f in result.findings]
    return "\n".join(parts)


def write_result(result: ExperimentResult, out: Path) -> list[Path]:
    """Write ``<out>/<name>.csv`` and, if the experiment draws one, ``<out>/<name>.png``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"{result.name}.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=result.columns)
        writer.writeheader()
        writer.writerows(result.rows)
    written = [csv_path]
    if result.draw is not None:
        figure = result.draw(result)
        png_path = out / f"{result.name}.png"
        figure.savefig(png_path, dpi=100)
        written.append(png_path)
    return written


def subplots(count: int, *, title: str, width: float = 5.0, height: float = 3.6):
    """A figure with ``count`` axes side by side (wrapping after three) and a title.

    Figures are drawn without pyplot (no global state, no GUI backend), on the Agg canvas.
    """
    columns = min(count, 3)
    rows = -(-count // columns)
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    FigureCanvasAgg(figure)  # render with Agg
    axes = figure.subplots(rows, columns, squeeze=False)
    flat = list(axes.flat)
    for unused in flat[count:]:
        unused.set_visible(False)
    figure.suptitle(title)
    return figure, flat[:count]

"""``aura plot``: loss, LR and tokens/s of one or several runs as a PNG (matplotlib)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

from aura import __version__ as aura_version
from aura.core import console
from aura.core.atomic import atomic_write_bytes
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.watch.runlog import (
    DISTILL_COLUMNS,
    KTO_COLUMNS,
    REWARD_COLUMNS,
    RL_REWARD_COLUMNS,
    SOURCE_VAL_PREFIX,
    SUITE_PREFIX,
    column_label,
    read_log,
)

M = Messages(
    "plot",
    {
        "no_dir": ("No existe el directorio de ejecución {path}.", "The run directory {path} does not exist."),
        "no_run_dirs": (
            "Indica al menos un directorio de ejecución: aura plot RUN_DIR [RUN_DIR ...] --out loss.png",
            "Give at least one run directory: aura plot RUN_DIR [RUN_DIR ...] --out loss.png",
        ),
        "bad_size": (
            "--width y --height (píxeles) deben estar entre 100 y 20000, y --dpi entre 20 y 1000.",
            "--width and --height (pixels) must be between 100 and 20000, and --dpi between 20 and 1000.",
        ),
        "bad_format": (
            "--out debe terminar en .png, .svg o .pdf; recibido {out}.",
            "--out must end in .png, .svg or .pdf; got {out}.",
        ),
        "empty_log": (
            "{path} no tiene filas con pérdida: la ejecución aún no ha registrado ningún paso.",
            "{path} has no rows with a loss: the run has not logged a step yet.",
        ),
        "loss_title": ("Pérdida", "Loss"),
        "lr_title": ("Tasa de aprendizaje", "Learning rate"),
        "rewards_title": (
            "Recompensas (DPO/ORPO/KTO, modelo de recompensa)",
            "Rewards (DPO/ORPO/KTO, reward model)",
        ),
        "rl_rewards_title": ("Recompensa (GRPO)", "Reward (GRPO)"),
        "distill_title": ("Respuestas propias del alumno (destilación)", "Student's own answers (distillation)"),
        "speed_title": ("Velocidad (tokens/s)", "Speed (tokens/s)"),
        "x_tokens": ("tokens vistos", "tokens seen"),
        "x_steps": ("paso", "step"),
        "suite_title": ("Precisión en aura-es", "aura-es accuracy"),
        "wrote": (
            "Gráfica guardada en {path} ({runs:ejecución|ejecuciones}).",
            "Plot saved to {path} ({runs:run|runs}).",
        ),
        "partial_columns": (
            "No todas las ejecuciones registran {cols}: se dibuja solo para {runs}.",
            "Not every run logs {cols}: drawn only for {runs}.",
        ),
    },
)


@dataclass
class PlotConfig:
    run_dirs: list[str] = arg(
        [],
        es="Directorios de ejecución (con training_log.csv).",
        en="Run directories (with training_log.csv).",
        positional=True,
        metavar="RUN_DIR",
    )
    out: str = arg(
        "loss.png",
        es="Archivo de salida (.png, .svg o .pdf), relativo a --output-dir.",
        en="Output file (.png, .svg or .pdf), relative to --output-dir.",
    )
    output_dir: str = arg(".", es="Directorio donde se guarda la gráfica.", en="Directory where the plot is saved.")
    width: int = arg(1800, es="Ancho en píxeles.", en="Width in pixels.")
    height: int = arg(600, es="Alto en píxeles.", en="Height in pixels.")
    dpi: int = arg(
        100,
        es="Puntos por pulgada (tamaño del texto relativo a la imagen).",
        en="Dots per inch (text size relative to the image).",
    )
    overwrite: bool = arg(
        False,
        es="Sustituir una imagen existente que no escribió Aura.",
        en="Replace an existing image that Aura did not write.",
    )

    def __post_init__(self):
        if not self.run_dirs:
            raise AuraError(M("no_run_dirs"))
        if not (100 <= self.width <= 20000 and 100 <= self.height <= 20000 and 20 <= self.dpi <= 1000):
            raise AuraError(M("bad_size"))
        if Path(self.out).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise AuraError(M("bad_format", out=self.out))
        for d in self.run_dirs:
            if not Path(d).is_dir():
                raise AuraError(M("no_dir", path=d))


def _labels(dirs: list[Path]) -> list[str]:
    """Run names for the legend: the dir name, or more of its path where names repeat."""
    names = [d.name or str(d) for d in dirs]
    if len(set(names)) == len(names):
        return names
    return [str(d) for d in dirs]


def _localize_ticks(fig) -> None:
    """Tick labels and axis offsets in the language's number format (Spanish: ``0,5``, ``2,5 k``):
    each axis keeps its formatter, whose text is rewritten with ``aura.core.i18n.localize``."""
    from matplotlib.ticker import Formatter

    from aura.core.i18n import current_lang, localize

    if current_lang() != "es":
        return

    class Localized(Formatter):
        def __init__(self, base):
            self.base = base

        def set_axis(self, axis):
            super().set_axis(axis)
            self.base.set_axis(axis)

        def set_locs(self, locs):
            self.base.set_locs(locs)

        def __call__(self, x, pos=None):
            return localize(self.base(x, pos))

        def get_offset(self):
            return localize(self.base.get_offset())

        def format_data(self, value):
            return localize(self.base.format_data(value))

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(Localized(axis.get_major_formatter()))


PLOT_MARK = f"Aura {aura_version} aura-plot"  # in the image's metadata: the PNG, SVG or PDF is Aura's


def is_aura_plot(path: Path, *, max_bytes: int = 64 << 20) -> bool:
    """True for an image ``aura plot`` wrote (its metadata holds ``PLOT_MARK``'s tag)."""
    try:
        return path.stat().st_size <= max_bytes and b"aura-plot" in path.read_bytes()
    except OSError:
        return False


def _note_partial_columns(labels: list[str], logs: list[list[dict]]) -> None:
    """Runs of different kinds log different columns (pretraining vs fine-tuning, with or without
    per-source validation, the aura-es suite, DPO rewards): each is drawn for the runs that log it, and
    the columns only some runs have are said, grouped by the runs that have them."""
    if len(logs) < 2:
        return
    logged = [{c for r in rows for c, v in r.items() if v is not None} for rows in logs]
    drawn = {"train_loss", "val_loss", "lr", "tokens_per_s"}
    drawn |= {*REWARD_COLUMNS, *KTO_COLUMNS, *RL_REWARD_COLUMNS, *DISTILL_COLUMNS}
    extra = sorted(
        c
        for c in set().union(*logged) - set.intersection(*logged)
        if c in drawn or c.startswith((SUITE_PREFIX, SOURCE_VAL_PREFIX))
    )
    groups: dict[tuple[str, ...], list[str]] = {}
    for col in extra:
        groups.setdefault(tuple(n for n, have in zip(labels, logged) if col in have), []).append(col)
    for runs, cols in groups.items():
        console.info(M("partial_columns", cols=", ".join(cols), runs=", ".join(runs)))


def _draw(ax, xs: list, ys: list, **style) -> None:
    """``ax.plot``, where a series of one point gets a marker (a line through one point draws nothing)."""
    if len(xs) == 1 and style.get("marker") is None:
        style["marker"] = "o"
    ax.plot(xs, ys, **style)


def plot(cfg: PlotConfig) -> int:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from aura.core.atomic import check_writable
    from aura.core.ownership import check_output_file

    check_writable(Path(cfg.output_dir) / cfg.out, flag="--out")
    check_output_file(
        Path(cfg.output_dir) / cfg.out, flag="--out", overwrite=cfg.overwrite, ours=is_aura_plot, inputs=cfg.run_dirs
    )  # never inside a run it reads, never over someone else's image
    dirs = [Path(d) for d in cfg.run_dirs]
    logs = _read_logs(dirs)
    # Tokens are the fair x axis across runs of different batch sizes; steps when a log lacks them.
    use_tokens = all(any(r["tokens"] is not None for r in rows) for rows in logs)

    fig = Figure(figsize=(cfg.width / cfg.dpi, cfg.height / cfg.dpi), dpi=cfg.dpi, layout="constrained")
    FigureCanvasAgg(fig)
    panels = _Panels.of(logs)
    _note_partial_columns(_labels(dirs), logs)
    axes = list(fig.subplots(1, 3 + bool(panels.titles) + bool(panels.suite_cols)))
    colours = [f"C{i % 10}" for i in range(len(dirs))]
    for label, rows, colour in zip(_labels(dirs), logs, colours):
        _draw_run(axes, panels, label=label, rows=rows, colour=colour, xcol="tokens" if use_tokens else "step")
    _finish_axes(axes, panels, use_tokens=use_tokens)
    _localize_ticks(fig)

    out = Path(cfg.output_dir) / cfg.out
    buf = io.BytesIO()
    fmt = out.suffix.lower().lstrip(".")
    fig.savefig(buf, format=fmt, dpi=cfg.dpi, metadata={"Software" if fmt == "png" else "Creator": PLOT_MARK})
    atomic_write_bytes(out, buf.getvalue())
    console.success(M("wrote", path=out, runs=len(dirs)))
    return 0


def _read_logs(dirs: list[Path]) -> list[list[dict]]:
    """Each run's training log; a run that has not logged a loss yet is refused."""
    logs = []
    for d in dirs:
        rows = read_log(d)
        if not any(r["train_loss"] is not None or r["val_loss"] is not None for r in rows):
            raise AuraError(M("empty_log", path=d / "training_log.csv"))
        logs.append(rows)
    return logs


@dataclass
class _Panels:
    """Which panels the figure has beyond loss, LR and speed (``axes[3]``: the objectives' own columns, rewards
    or distillation's share of the student's own answers; the last: the suite)."""

    preference: bool  # DPO/ORPO/KTO rewards, the reward model's accuracy and margin
    rl: bool  # GRPO's reward
    distill: bool  # distillation's on_policy share
    suite_cols: list[str]  # the aura-es suite's accuracies
    source_cols: list[str]  # a mixture's per-source validation losses

    @property
    def rewards(self) -> bool:
        return self.preference or self.rl

    @property
    def titles(self) -> list[str]:
        """The objective panel's title parts (``axes[3]``), one per kind of run drawn; none: no such panel."""
        kinds = (("rewards_title", self.preference), ("rl_rewards_title", self.rl), ("distill_title", self.distill))
        return [title for title, present in kinds if present]

    @classmethod
    def of(cls, logs: list[list[dict]]) -> _Panels:
        return cls(
            preference=any(r.get(c) is not None for rows in logs for r in rows for c in REWARD_COLUMNS + ("kl",)),
            rl=any(r.get(c) is not None for rows in logs for r in rows for c in RL_REWARD_COLUMNS),  # GRPO
            distill=any(r.get(c) is not None for rows in logs for r in rows for c in DISTILL_COLUMNS),
            suite_cols=sorted({c for rows in logs for r in rows for c in r if c.startswith(SUITE_PREFIX)}),
            source_cols=sorted({c for rows in logs for r in rows for c in r if c.startswith(SOURCE_VAL_PREFIX)}),
        )


def _draw_run(axes: list, panels: _Panels, *, label: str, rows: list[dict], colour: str, xcol: str) -> None:
    """One run's curves on every panel, in its colour."""
    ax_loss, ax_lr, ax_speed = axes[:3]
    rewards = panels.rewards

    def series(col, kinds):  # a column this run does not log is an empty series
        pts = [
            (r[xcol], r.get(col))
            for r in rows  # a diverged loss (inf, nan) is not drawn
            if r["kind"] in kinds and r[xcol] is not None and r.get(col) is not None and math.isfinite(r[col])
        ]
        return [p[0] for p in pts], [p[1] for p in pts]

    xs, ys = series("train_loss", ("step",))
    if xs:
        _draw(ax_loss, xs, ys, color=colour, lw=1.2, label=f"{label} ({column_label('train_loss')})")
    # the per-epoch averages: their own series of markers (joined to the per-interval values, the curve
    # would jump at every epoch's end); a line too when they are all the log has (short fine-tunes)
    ex, ey = series("train_loss", ("epoch",))
    if ex:
        ax_loss.plot(
            ex,
            ey,
            color=colour,
            lw=1.2,
            ls="-" if not xs else "none",
            marker="D",
            ms=5,
            label=f"{label} ({column_label('train_loss', epoch_avg=True)})",
        )
    xs, ys = series("val_loss", ("eval", "epoch", "step"))
    if xs:
        ax_loss.plot(
            xs, ys, color=colour, lw=1.2, ls="--", marker="o", ms=3, label=f"{label} ({column_label('val_loss')})"
        )
    for col, marker in zip(panels.source_cols, "xs^vdP*"):  # per-source validation of a mixture
        xs, ys = series(col, ("eval", "epoch", "step"))
        if xs:
            ax_loss.plot(
                xs, ys, color=colour, lw=1.0, ls=":", marker=marker, ms=4, label=f"{label} ({column_label(col)})"
            )
    _draw(ax_lr, *series("lr", ("step",)), color=colour, lw=1.2, label=label)
    _draw(ax_speed, *series("tokens_per_s", ("step",)), color=colour, lw=1.2, label=label)
    if rewards and any(r.get("rewards/margin") is not None for r in rows):
        for col, style in zip(REWARD_COLUMNS, ("-", ":")):
            _draw(
                axes[3], *series(col, ("step",)), color=colour, lw=1.2, ls=style, label=f"{label} ({column_label(col)})"
            )
    if rewards and any(r.get("kl") is not None for r in rows):  # KTO: each kind's reward and the KL estimate
        for col, style in zip(KTO_COLUMNS, ("-", "--", ":")):
            _draw(
                axes[3], *series(col, ("step",)), color=colour, lw=1.2, ls=style, label=f"{label} ({column_label(col)})"
            )
    if rewards and any(r.get("reward") is not None for r in rows):  # GRPO: the rollouts' mean reward
        _draw(axes[3], *series("reward", ("step",)), color=colour, lw=1.2, label=f"{label} ({column_label('reward')})")
        xs, ys = series("val_reward", ("eval", "step"))
        if xs:  # the greedy completions of the validation prompts
            axes[3].plot(
                xs, ys, color=colour, lw=1.2, ls="--", marker="o", ms=3, label=f"{label} ({column_label('val_reward')})"
            )
    if panels.distill and any(r.get("on_policy") is not None for r in rows):  # distillation: a share, 0 to 1
        _draw(
            axes[3],
            *series("on_policy", ("step",)),
            color=colour,
            lw=1.2,
            label=f"{label} ({column_label('on_policy')})",
        )
    for col, style in zip(panels.suite_cols, ("-", "--", ":", "-.", (0, (1, 3)), (0, (5, 1)))):
        xs, ys = series(col, ("eval",))
        if xs:
            axes[-1].plot(
                xs, ys, color=colour, lw=1.2, ls=style, marker="o", ms=3, label=f"{label} ({column_label(col)})"
            )


def _finish_axes(axes: list, panels: _Panels, *, use_tokens: bool) -> None:
    """Titles, x labels, grids, legends and number formats of the panels."""
    from matplotlib.ticker import EngFormatter

    ax_loss, ax_lr, ax_speed = axes[:3]
    titled = [(ax_loss, ["loss_title"]), (ax_lr, ["lr_title"]), (ax_speed, ["speed_title"])]
    titled += [(axes[3], panels.titles)] if panels.titles else []
    for ax, titles in titled + ([(axes[-1], ["suite_title"])] if panels.suite_cols else []):
        ax.set_title(" · ".join(M(t) for t in titles))
        ax.set_xlabel(M("x_tokens") if use_tokens else M("x_steps"))
        ax.grid(alpha=0.3)
        if use_tokens:
            ax.xaxis.set_major_formatter(EngFormatter())
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax_speed.yaxis.set_major_formatter(EngFormatter())

"""Everything Aura prints goes through here.

On a terminal: rich colours, progress bars and tables. Elsewhere (CI, a file, a pipe): plain lines,
one per update, so logs stay readable. Under torchrun every line starts with the rank prefix
``[Rank r/W | Node host | Device d]`` (set by ``aura.distributed``).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from typing import Iterable, Sequence

_prefix = ""
_quiet = False


def set_prefix(prefix: str) -> None:
    global _prefix
    _prefix = prefix


def set_quiet(quiet: bool) -> None:
    """Silence info lines (non-zero ranks use this); warnings and errors still print."""
    global _quiet
    _quiet = quiet


def is_tty() -> bool:
    if os.environ.get("AURA_PLAIN"):
        return False
    return sys.stdout.isatty()


# Third-party tqdm bars (transformers' "Writing model shards", datasets' "Map") print a carriage-return
# line per update, which turns a log file into noise: off when the output is not a terminal (a user's
# explicit HF_HUB_DISABLE_PROGRESS_BARS wins). Set at import, before those libraries read it.
if not is_tty():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # every other tqdm bar (lm-eval's "Running loglikelihood...")

# Loggers of libraries whose warnings say nothing a user of Aura can act on, in English, in the middle of
# Aura's output (bitsandbytes: "Failed to load CPU gemm_4bit_forward from kernels-community").
THIRD_PARTY_LOGGERS = ("bitsandbytes", "lm_eval", "lm-eval")


def quiet_third_party(*, debug: bool) -> None:
    """Libraries speak English in their own words: their progress bars (when Aura speaks Spanish; Aura
    shows its own progress) and their chatter off, unless ``--debug`` (or the user set the variable)."""
    import logging

    from aura.core.i18n import current_lang

    if debug:
        return
    if current_lang() == "es":
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def library_stderr(drop: re.Pattern[str]):
    """Run a library that writes to the process's stderr itself or through child processes (lm-eval runs
    ``git describe``, whose "fatal: not a git repository" reaches the terminal): its stderr is captured at
    the file-descriptor level and, afterwards, every line ``drop`` does not match is printed back."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode("utf-8", "replace").replace("\r", "\n").splitlines():
                if line.strip() and not drop.search(line):
                    sys.stderr.write(line + "\n")
            sys.stderr.flush()


_rich_console = None


def _console(stderr: bool = False):
    global _rich_console
    from rich.console import Console

    if stderr:
        return Console(stderr=True, highlight=False)
    if _rich_console is None:
        _rich_console = Console(highlight=False)
    return _rich_console


def _emit(text: str, *, style: str | None = None, stderr: bool = False) -> None:
    line = f"{_prefix} {text}" if _prefix else text
    if is_tty():
        from rich.markup import escape

        _console(stderr).print(escape(line), style=style)
    else:
        stream = sys.stderr if stderr else sys.stdout
        # one write per line: ranks sharing a pipe (torchrun) must not interleave a line and its newline
        stream.write(line + "\n")
        stream.flush()


def info(text: str) -> None:
    if not _quiet:
        _emit(text)


def always(text: str) -> None:
    """Printed on every rank (sync checks, per-rank diagnostics)."""
    _emit(text)


def success(text: str) -> None:
    if not _quiet:
        _emit(text, style="bold green")


def warn(text: str) -> None:
    from aura.core.i18n import bi

    _emit(f"{bi('Aviso', 'Warning')}: {text}", style="yellow", stderr=True)


def error(text: str) -> None:
    _emit(f"Error: {text}", style="bold red", stderr=True)


def table(title: str, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    rows = [[("" if c is None else str(c)) for c in r] for r in rows]
    if _quiet:
        return
    if is_tty():
        from rich.markup import escape
        from rich.table import Table

        # Cells are data (paths, commands): "[...]" in them must print as is, not as rich markup.
        t = Table(title=escape(f"{_prefix} {title}" if _prefix else title))
        for h in headers:
            t.add_column(escape(str(h)))
        for r in rows:
            t.add_row(*map(escape, r))
        _console().print(t)
        return
    widths = [max([len(str(h))] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    print(f"{_prefix} {title}" if _prefix else title, flush=True)
    print("  ".join(str(h).ljust(w) for h, w in zip(headers, widths)), flush=True)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), flush=True)


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h >= 24:
        d, h = divmod(h, 24)
        return f"{d}d{h:02d}h{m:02d}m"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A progress bar with rates, e.g. documents/s and tokens/s, and an ETA.

    ``Progress(total, unit="docs", extra_units=("tokens",))``; ``update(n, tokens=k)``.
    On a terminal it is a rich live bar; otherwise a plain line every ``plain_every`` seconds.
    """

    def __init__(
        self,
        description: str,
        total: int | None = None,
        *,
        unit: str = "it",
        extra_units: Sequence[str] = (),
        plain_every: float = 10.0,
    ):
        self.description = description
        self.total = total
        self.unit = unit
        self.extra_units = tuple(extra_units)
        self.count = 0
        self.extra = {u: 0 for u in self.extra_units}
        self.start = time.perf_counter()
        self.plain_every = plain_every
        self._last_plain = self.start
        self._rich = None
        self._task = None

    def __enter__(self) -> "Progress":
        if is_tty() and not _quiet:
            from rich.progress import (
                BarColumn,
                Progress as RichProgress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[rates]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=_console(),
                transient=False,
            )
            self._rich.__enter__()
            self._task = self._rich.add_task(self.description, total=self.total, rates="")
        return self

    def rates(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        from aura.core.i18n import num

        parts = [f"{num(self.count / elapsed, ',.0f')} {self.unit}/s"]
        parts += [f"{num(v / elapsed, ',.0f')} {u}/s" for u, v in self.extra.items()]
        return " | ".join(parts)

    def eta(self) -> str:
        if not self.total or not self.count:
            return "?"
        elapsed = time.perf_counter() - self.start
        return format_duration(elapsed / self.count * (self.total - self.count))

    def update(self, n: int = 1, **extra: int) -> None:
        self.count += n
        for k, v in extra.items():
            self.extra[k] = self.extra.get(k, 0) + v
        if self._rich is not None:
            self._rich.update(self._task, advance=n, rates=self.rates())
            return
        now = time.perf_counter()
        if now - self._last_plain >= self.plain_every and not _quiet:
            self._last_plain = now
            from aura.core.i18n import num

            total = f"/{num(self.total)}" if self.total else ""
            info(f"{self.description}: {num(self.count)}{total} {self.unit} | {self.rates()} | ETA {self.eta()}")

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)

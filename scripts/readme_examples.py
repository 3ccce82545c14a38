"""Run the README's first example (section 1, the laptop) as written and regenerate what the READMEs say
it printed, so the quoted values are those a user gets (issue 25, item 13).

The commands are read from README.md's "### 1." block (README.en.md shows the same flags; the test checks
it) and run in a scratch directory whose ``mis_textos/`` is the embedded corpus, in a fresh interpreter
each, as a user types them. A command that warns fails the script: an example must not teach a mistake.
The measured values go to ``scripts/readme_examples.json``; the paragraph between the
``<!-- readme-examples:laptop -->`` markers of both READMEs is rendered from them, numbers written the
language's way (``6,11`` / ``6.11``).

    python scripts/readme_examples.py           # run the commands (~5 min on 2 cores), rewrite JSON + READMEs
    python scripts/readme_examples.py --render  # only re-render the READMEs from the JSON (no training)
    python scripts/readme_examples.py --check   # exit 1 if the READMEs differ from what the JSON renders

The values depend on the machine (bf16 on CPUs that have it, fp32 elsewhere): the JSON records the CPU,
the precision and the Aura version beside them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aura.core.i18n import num  # noqa: E402

RESULTS = ROOT / "scripts" / "readme_examples.json"
READMES = {"es": ROOT / "README.md", "en": ROOT / "README.en.md"}
START, END = "<!-- readme-examples:laptop -->", "<!-- /readme-examples:laptop -->"


def section_commands(readme: Path, heading: str = "### 1.") -> list[str]:
    """The ``aura ...`` lines of the first ```bash block under the heading (continuations joined)."""
    text = readme.read_text(encoding="utf-8")
    start = text.index("\n" + heading)
    block = re.search(r"```bash\n(.*?)```", text[start:], flags=re.S)
    lines = block.group(1).replace("\\\n", " ").splitlines()
    return [" ".join(line.split(" #", 1)[0].split()) for line in lines if line.strip().startswith("aura ")]


def _run(line: str, cwd: Path) -> str:
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "aura", *shlex.split(line)[1:]]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    print(f"$ {line}  ({time.perf_counter() - t0:.0f} s)\n{out}", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"readme_examples: '{line}' failed with exit code {proc.returncode}")
    warnings = [ln for ln in out.splitlines() if ln.startswith("Warning:")]
    if warnings:
        raise SystemExit(f"readme_examples: '{line}' warns; fix the README's example:\n" + "\n".join(warnings))
    return out


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure() -> dict:
    """Run section 1's commands in a scratch directory; returns the values the READMEs quote."""
    from aura import __version__

    commands = section_commands(READMES["es"])
    with tempfile.TemporaryDirectory(prefix="aura-readme-") as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "aura" / "resources" / "corpus_es", work / "mis_textos")
        outputs = [_run(line, work) for line in commands]
        meta = json.loads((work / "data" / "es" / "meta.json").read_text(encoding="utf-8"))
        tok = json.loads((work / "tok" / "aura_tokenizer.json").read_text(encoding="utf-8"))
        run = work / "runs" / "mi-modelo"
        config = json.loads((run / "model_config.json").read_text(encoding="utf-8"))
        with open(run / "training_log.csv", newline="", encoding="utf-8") as f:
            vals = [(int(r["step"]), float(r["val_loss"])) for r in csv.DictReader(f) if r.get("val_loss")]
    if not vals:
        raise SystemExit("readme_examples: the run logged no validation loss")
    best_step, best_val = min(vals, key=lambda v: (v[1], v[0]))
    last_step, last_val = vals[-1]
    sample = next((ln for ln in outputs[-1].splitlines() if ln.startswith("Había una vez")), "")
    return {
        "commands": commands,
        "vocab_size": int(tok["vocab_size"]),
        "train_tokens": int(meta["splits"]["train"]["tokens"]),
        "steps_per_epoch": int(config["plan"]["steps_per_epoch"]),
        "total_steps": int(config["plan"]["total_steps"]),
        "best_step": best_step,
        "best_val_loss": round(best_val, 2),
        "last_step": last_step,
        "last_val_loss": round(last_val, 2),
        "validations": len(vals),
        "sample": sample,
        "measured_on": {
            "cpu": _cpu(),
            "precision": config.get("precision"),
            "aura_version": __version__,
            "date": time.strftime("%Y-%m-%d"),
        },
    }


def paragraph(r: dict, lang: str) -> str:
    """The README's text about section 1's run, in ``lang``, from the measured values."""

    def n(v, spec=","):
        return num(v, spec, lang=lang)

    best, last = n(r["best_val_loss"], ".2f"), n(r["last_val_loss"], ".2f")
    if lang == "es":
        trend = (
            f"la pérdida de validación baja hasta el paso {r['best_step']} ({best}) y a partir de ahí sube "
            f"({last} en el paso {r['last_step']}): el modelo empieza a memorizar el texto"
            if r["best_step"] < r["last_step"]
            else f"la pérdida de validación baja hasta el último paso, el {r['last_step']} ({last})"
        )
        return (
            f"Medido con el corpus incluido (`aura/resources/corpus_es/` como `mis_textos/`: "
            f"{n(r['train_tokens'])} tokens de entrenamiento con el vocabulario de {n(r['vocab_size'])}, "
            f"{r['steps_per_epoch']} pasos por época): {trend}. Con más texto, sube `--max-steps`. Pase lo "
            f"que pase, `best/` guarda el modelo del paso con menor pérdida de validación (`aura generate "
            f"--model runs/mi-modelo/best`), y Aura avisa cuando la validación sube varias veces seguidas. "
            f"Estos valores los escribe `python scripts/readme_examples.py`, que ejecuta las órdenes de "
            f"arriba."
        )
    trend = (
        f"validation loss falls until step {r['best_step']} ({best}) and rises from there ({last} at step "
        f"{r['last_step']}): the model starts to memorise the text"
        if r["best_step"] < r["last_step"]
        else f"validation loss falls until the last step, {r['last_step']} ({last})"
    )
    return (
        f"Measured on the embedded corpus (`aura/resources/corpus_es/` as `my_texts/`: "
        f"{n(r['train_tokens'])} training tokens with the {n(r['vocab_size'])}-token vocabulary, "
        f"{r['steps_per_epoch']} steps per epoch): {trend}. With more text, raise `--max-steps`. Whatever "
        f"happens, `best/` keeps the model of the step with the lowest validation loss (`aura generate "
        f"--model runs/my-model/best`), and Aura says so when validation rises several times in a row. "
        f"`python scripts/readme_examples.py` writes these values by running the commands above."
    )


def _wrap(text: str, width: int = 110) -> str:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line])


def rendered(readme_text: str, r: dict, lang: str) -> str:
    """``readme_text`` with the marked paragraph replaced by the one ``r`` gives."""
    if START not in readme_text or END not in readme_text:
        raise SystemExit(f"readme_examples: the markers {START} ... {END} are missing")
    head, rest = readme_text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{_wrap(paragraph(r, lang))}\n{END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--render", action="store_true", help="re-render the READMEs from the JSON, no training")
    ap.add_argument("--check", action="store_true", help="exit 1 if the READMEs differ from the JSON")
    args = ap.parse_args()
    if args.render or args.check:
        results = json.loads(RESULTS.read_text(encoding="utf-8"))
    else:
        results = measure()
        RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    stale = []
    for lang, path in READMES.items():
        text = path.read_text(encoding="utf-8")
        new = rendered(text, results, lang)
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"readme_examples: {', '.join(stale)} differ from {RESULTS.name}; run scripts/readme_examples.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every command, run as a Spanish-speaking user runs it (``AURA_LANG=es``), prints Spanish: no English
word of the list tests/test_i18n.py keeps (plus the labels and third-party messages that used to leak:
"Loss", "Autocast=ON", "fertility", the check-dist headers, bitsandbytes/lm-eval/git warnings) on any
line, numbers with a decimal comma, and no temporary path (issue 25, items 10 and 11).

The cheap path of each command, on the session's tiny models: tokenizer train, data prepare, pretrain,
finetune (LoRA), generate, chat (stdin), eval (aura-es, --limit), export gguf, merge, runs, plot,
monitor --once, doctor and a one-process check-dist.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

import pytest

from tests.conftest import RESOURCES, run_aura
from tests.test_i18n import ENGLISH_IN_SPANISH

# Besides the catalogue list: words of the labels and of the third-party messages that leaked.
ENGLISH_OUTPUT = ENGLISH_IN_SPANISH | {
    "autocast=on",
    "autocast=off",
    "it",
    "its",
    "which",
    "was",
    "were",
    "be",
    "been",
    "has",
    "have",
    "can",
    "cannot",
    "may",
    "might",
    "only",
    "without",
    "support",
    "supported",
    "compiled",
    "unavailable",
    "git",
    "fatal",
    "repository",
    "progress",
    "processing",
    "requests",
    "running",
    "tasks",
    "generating",
    "building",
    "checking",
    "writing",
    "computing",
    "setting",
    "created",
    "verifying",
    "future",
    "default",
    "set",
    "instead",
}
ES = {"AURA_LANG": "es"}


def _prose(line: str) -> str:
    """What a reader reads as language in an output line: without quoted values, flags, paths, commands,
    KEY=VALUE tokens that stay as they are (Sync=, Backend=), URLs and the rank prefix."""
    line = re.sub(r"\[Rank [^\]]*\]", " ", line)
    line = re.sub(r"""'[^']*'|"[^"]*"|`[^`]*`""", " ", line)
    line = re.sub(r"https?://\S+", " ", line)
    line = re.sub(r"(pip install|aura|torchrun|tensorboard|ollama)\s.*", " ", line)  # a command to copy
    line = re.sub(r"--[\w-]+(\s+(auto|none|ddp|fsdp|latest|lora|qlora|full|\S*[\d/.]\S*))?", " ", line)
    line = re.sub(r"\b(Sync|Backend)=\S+", " ", line)
    line = re.sub(r"\S*[/_.@]\S*|\S*\w-\w\S*", " ", line)  # paths, names: snake_case, checkpoint-step-3
    return line


def english_lines(text: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for line in text.splitlines():
        if any(s and s in line for s in skip):
            continue
        words = {w.lower() for w in re.findall(r"[^\W\d_]+(?:=[A-Z]+)?", _prose(line))}
        found = words & ENGLISH_OUTPUT
        if found or re.search(r"\bLoss\b|Autocast=", line):
            bad.append(f"{sorted(found)}: {line}")
    return bad


def test_english_lines_finds_what_leaked():
    """The filter itself: the lines issue 25 quoted are caught, Spanish lines and kept tokens are not."""
    leaked = [
        "Época 1 | Paso 10/168 | Loss: 7.6065 | LR 2.00e-03",
        "Precisión activa: bf16 | Autocast=ON | GradScaler=OFF",
        "The installed version of bitsandbytes was compiled without GPU support.",
        "fatal: not a git repository (or any of the parent directories): .git",
        "Tokenizador guardado: fertility 1,692 tokens/palabra",
    ]
    assert len(english_lines("\n".join(leaked))) == len(leaked)
    spanish = [
        "Época 1 | Paso 10/168 | Pérdida: 7,6065 | LR 2,00e-03 | Grad 0,665 | 1833 tok/s | MFU -",
        "[Rank 0/2 | Node h | Device cpu] Sync=OK Backend=gloo",
        "Siguiente paso: aura export gguf --model runs/a/final --quant q8_0",
        "Precisión activa: bf16 | autocast activado | GradScaler desactivado",
    ]
    assert english_lines("\n".join(spanish)) == []


DECIMAL_POINT = re.compile(r"(?<![\w.\-/=])\d+\.\d+(?![\w.\-/])")  # 6.11 as prose (not 2.13.0, not v1.2)


def point_numbers(text: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Lines with a number written with a decimal point outside a flag's value, a path or a KEY=VALUE."""
    bad = []
    for line in text.splitlines():
        if any(s and s in line for s in skip):
            continue
        bare = re.sub(r"--[\w-]+[ =]\S+|\S*[/=@]\S*|'[^']*'|`[^`]*`|\d+\.\d+\.\d+\S*", " ", line)
        if DECIMAL_POINT.search(bare):
            bad.append(line)
    return bad


@pytest.mark.slow
def test_every_command_speaks_spanish(tiny_zoo, tmp_path):
    corpus = tmp_path / "textos"
    shutil.copytree(RESOURCES / "corpus_es", corpus)
    runs = tmp_path / "runs"
    outputs: dict[str, str] = {}
    temp_marks = (".tmp-", "~")

    def aura(name: str, *args, input: str | None = None, code: int = 0) -> str:
        r = run_aura(*args, env={**ES, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, cwd=tmp_path, input=input)
        out = r.stdout + r.stderr
        assert r.returncode == code, f"{name}: exit {r.returncode}\n{out[-4000:]}"
        outputs[name] = out
        return out

    tiny = [
        "--model-preset",
        "manual",
        "--embed-size",
        "64",
        "--num-layers",
        "2",
        "--num-heads",
        "4",
        "--seq-length",
        "32",
        "--intermediate-size",
        "256",
        "--batch-size",
        "4",
        "--log-interval",
        "1",
        "--sample-tokens",
        "4",
        "--warmup-steps",
        "1",
        "--eval-interval",
        "2",
        "--max-steps",
        "3",
        "--precision",
        "bf16",
    ]
    aura("tokenizer train", "tokenizer", "train", corpus, "--vocab-size", "600", "--output-dir", "tok")
    aura("data prepare", "data", "prepare", corpus, "--tokenizer", "tok", "--output-dir", "data")
    aura("pretrain", "pretrain", "--data", "data", "--output-dir", runs / "p", *tiny)
    aura(
        "finetune",
        "finetune",
        "--base-model",
        tiny_zoo["llama"],
        "--method",
        "lora",
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--max-length",
        "64",
        "--truncation",
        "truncate",
        "--output-dir",
        runs / "ft",
        "--log-interval",
        "1",
    )
    sample = "Había una vez"
    aura("generate", "generate", "--model", runs / "p" / "final", "--prompt", sample, "--max-new-tokens", "4")
    aura("generate adapter", "generate", "--model", runs / "ft" / "final", "--prompt", sample, "--max-new-tokens", "4")
    aura("chat", "chat", "--model", tiny_zoo["llama"], "--max-new-tokens", "4", input="hola\n/salir\n")
    aura("eval", "eval", "--model", tiny_zoo["llama"], "--suite", "aura-es", "--limit", "2", "--output-dir", "eval")
    if importlib.util.find_spec("lm_eval") is not None:  # lm-eval's progress bars and `git describe` output
        aura(
            "eval tasks",
            "eval",
            "--model",
            tiny_zoo["gpt2"],
            "--tasks",
            "aura_es_causa_efecto",
            "--limit",
            "4",
            "--batch-size",
            "3",
            "--output-dir",
            "eval-tasks",
        )
    aura(
        "merge",
        "merge",
        "--base-model",
        tiny_zoo["llama"],
        "--adapter",
        runs / "ft" / "final",
        "--output-dir",
        "merged",
    )
    aura("export gguf", "export", "gguf", "--model", "merged", "--outfile", "m.gguf")
    aura("runs", "runs", runs)
    aura("plot", "plot", runs / "p", runs / "ft", "--out", "curvas.png")
    aura("monitor", "monitor", "--once")
    aura("doctor", "doctor")
    aura("check-dist", "check-dist", "--size-mb", "1", "--iters", "2")

    generated = [
        line
        for line in outputs["generate"].splitlines()
        + outputs["generate adapter"].splitlines()
        + outputs["chat"].splitlines()
        if sample in line or line.startswith(("Asistente", "Tú"))
    ]
    leaks = {name: english_lines(out, skip=tuple(generated)) for name, out in outputs.items()}
    assert not any(leaks.values()), "English under AURA_LANG=es:\n" + "\n".join(
        f"{name}: {line}" for name, lines in leaks.items() for line in lines
    )
    points = {name: point_numbers(out, skip=tuple(generated)) for name, out in outputs.items()}
    assert not any(points.values()), "Numbers with a decimal point under AURA_LANG=es:\n" + "\n".join(
        f"{name}: {line}" for name, lines in points.items() for line in lines
    )
    temps = [
        f"{name}: {line}"
        for name, out in outputs.items()
        for line in out.splitlines()
        if all(m in line for m in temp_marks)
    ]
    assert not temps, "temporary paths shown to the user:\n" + "\n".join(temps)
    assert re.search(r"Pérdida: \d+,\d{4}", outputs["pretrain"]), outputs["pretrain"]


def _write_log(run, rows: int = 20):
    import csv

    from aura.train.run.metrics import CSV_COLUMNS

    run.mkdir(parents=True)
    with open(run / "training_log.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for s in range(1, rows + 1):
            w.writerow(
                {
                    "time": "2026-11-25T10:00:00+00:00",
                    "kind": "step",
                    "epoch": 1,
                    "step": s,
                    "tokens": s * 2048,
                    "train_loss": f"{8 - s * 0.1:.6f}",
                    "lr": f"{2e-3 * (1 - s / 40):.6e}",
                    "grad_norm": "0.5",
                    "tokens_per_s": f"{1800 + 5 * s:.1f}",
                    "seconds": f"{1.1 * s:.2f}",
                }
            )
            if s % 5 == 0:
                w.writerow(
                    {
                        "time": "2026-11-25T10:00:00+00:00",
                        "kind": "eval",
                        "epoch": 1,
                        "step": s,
                        "tokens": s * 2048,
                        "val_loss": f"{8 - s * 0.09:.6f}",
                        "seconds": f"{1.1 * s:.2f}",
                    }
                )


@pytest.mark.parametrize("lang", ["es", "en"])
def test_plot_numbers_in_the_language(tmp_path, lang):
    """The plot's tick labels and axis offsets: ``6,25`` and ``1e−3`` in Spanish, ``6.25`` in English
    (matplotlib's SVG keeps each text as a comment beside its glyphs)."""
    from tests.conftest import run_aura_here

    _write_log(tmp_path / "run")
    r = run_aura_here("plot", tmp_path / "run", "--out", "p.svg", "--output-dir", tmp_path, env={"AURA_LANG": lang})
    assert r.returncode == 0, r.stderr
    texts = re.findall(r"<!-- (.*?) -->", (tmp_path / "p.svg").read_text(encoding="utf-8"))
    ticks = [t for t in texts if re.fullmatch(r"[−-]?\d+([.,]\d+)?( k)?", t)]
    decimals = [t for t in ticks if re.search(r"[.,]", t)]
    assert decimals, texts
    sign = "," if lang == "es" else "."
    assert all(sign in t for t in decimals), decimals


def test_training_log_lines_in_spanish_and_csv_with_a_point(tmp_path, capsys, monkeypatch):
    """The step line and an evaluator's values: decimal comma and integer token counts on the console
    (``tokens_es=4096``, never ``4096.0000``), the CSV unchanged (a point, machine-readable)."""
    import csv

    from aura.core.i18n import set_lang
    from aura.distributed import DistInfo
    from aura.train.run.metrics import MetricsLogger

    set_lang("es")
    log = MetricsLogger(
        tmp_path, dist=DistInfo(), total_steps=20, tensorboard=False, extra_columns=("val_loss_es", "tokens_es")
    )
    log.step(
        step=10,
        epoch=0,
        tokens=40960,
        loss=6.1134,
        lr=2e-3,
        grad_norm=0.665,
        tokens_per_s=12345.6,
        mfu=None,
        seconds=1.0,
        eta_s=30.0,
        elapsed_s=12.5,
    )
    log.values(step=10, epoch=0, tokens=40960, values={"val_loss_es": 5.73124, "tokens_es": 4096.0}, elapsed_s=13.0)
    log.epoch(
        step=10, epoch=0, epochs=2, tokens=40960, train_loss=6.2, val_loss=6.15, epoch_seconds=12.5, elapsed_s=13.5
    )
    log.close()
    out = capsys.readouterr().out
    assert "Pérdida: 6,1134 | LR 2,00e-03 | Grad 0,665 | 12\u202f346 tok/s" in out, out
    assert "val_loss_es=5,7312 | tokens_es=4096" in out, out
    assert "Pérdida de entrenamiento: 6,2000 | Pérdida de validación: 6,1500 | Duración época: 12,5s" in out, out
    rows = list(csv.DictReader(open(tmp_path / "training_log.csv", encoding="utf-8")))
    assert rows[0]["train_loss"] == "6.113400" and rows[1]["tokens_es"] == "4096.000000", rows
    assert rows[2]["val_loss"] == "6.150000", rows


def test_library_stderr_drops_only_the_noise(capfd):
    """What lm-eval's child `git describe` writes straight to the terminal is dropped; anything else a
    library writes (an error) still reaches the user."""
    import subprocess

    from aura.core import console
    from aura.evaluation.task_scores import HARNESS_NOISE

    with console.library_stderr(drop=HARNESS_NOISE):
        subprocess.run(
            [
                "sh",
                "-c",
                "echo 'fatal: not a git repository (or any of the parent directories): .git' >&2;"
                "printf 'Running loglikelihood requests:  50%%|#    | 4/8\\r' >&2; echo 'algo falló' >&2",
            ]
        )
    err = capfd.readouterr().err
    assert "algo falló" in err and "fatal" not in err and "loglikelihood" not in err, err

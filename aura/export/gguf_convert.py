"""llama.cpp's own converter (``convert_hf_to_gguf.py``) as the first writer of ``aura export gguf``.

The converter is not in llama-cpp-python's wheel, only in its sdist (``vendor/llama.cpp``: the script, its
``conversion/`` package and ``gguf-py``). Aura finds it, in this order: ``--llama-cpp-dir`` (a llama.cpp
checkout), the environment variable ``AURA_LLAMA_CPP_DIR``, or Aura's cache
(``~/.cache/aura/llama.cpp/VERSION``), which ``--converter llama.cpp`` fills once from the sdist of the
llama-cpp-python that is installed (``pip download``), so the converter and the llama.cpp that verifies the
file are the same release. It runs as a subprocess with Aura's Python and its own ``gguf-py``.

``choose`` decides which writer exports a model: with ``--converter auto`` (the default), llama.cpp's when
it is on this machine and knows both the architecture (its ``ModelBase.register`` names) and the tokenizer
(a SentencePiece ``tokenizer.model``, or a byte-level BPE whose pre-tokeniser hash is in its list, computed
exactly as the converter does), else Aura's writer, saying why. Aura-trained or Aura-extended byte-level BPE
tokenizers have hashes llama.cpp cannot know, and Gemma without ``tokenizer.model`` is refused by the
converter: those stay with Aura's writer. Every file is verified in llama.cpp whichever writer wrote it.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "gguf_convert",
    {
        "bad_dir": (
            "{what} ({path}) no es una copia de llama.cpp con su conversor: falta {missing}. Indica la "
            "carpeta raíz de un clon de llama.cpp (la que contiene convert_hf_to_gguf.py).",
            "{what} ({path}) is not a llama.cpp copy with its converter: {missing} is missing. Give the "
            "root folder of a llama.cpp clone (the one holding convert_hf_to_gguf.py).",
        ),
        "no_llama_cpp": (
            "--converter llama.cpp necesita llama-cpp-python instalado (el conversor se toma de su "
            "misma versión) o --llama-cpp-dir. O usa --converter aura.",
            "--converter llama.cpp needs llama-cpp-python installed (the converter is taken from "
            "the same version) or --llama-cpp-dir. Or use --converter aura.",
        ),
        "fetching": (
            "Descargando el conversor de llama.cpp (sdist de llama-cpp-python {version}, unos 77 MB, una "
            "sola vez) en {path}…",
            "Downloading llama.cpp's converter (llama-cpp-python {version}'s sdist, about 77 MB, once) into {path}…",
        ),
        "fetch_failed": (
            "No se pudo descargar el sdist de llama-cpp-python {version} ({why}). Indica un clon de "
            "llama.cpp con --llama-cpp-dir o usa --converter aura.",
            "Could not download llama-cpp-python {version}'s sdist ({why}). Point --llama-cpp-dir at a "
            "llama.cpp clone or use --converter aura.",
        ),
        "using": (
            "Escribe el GGUF el conversor de llama.cpp ({path}).",
            "llama.cpp's converter writes the GGUF ({path}).",
        ),
        "fallback": ("Escribe el GGUF el escritor de Aura: {why}.", "Aura's writer writes the GGUF: {why}."),
        "why_absent": (
            "el conversor de llama.cpp no está en esta máquina (--converter llama.cpp lo descarga una "
            "vez; o --llama-cpp-dir)",
            "llama.cpp's converter is not on this machine (--converter llama.cpp downloads it once; or "
            "--llama-cpp-dir)",
        ),
        "why_arch": (
            "el conversor de llama.cpp no conoce la arquitectura {arch}",
            "llama.cpp's converter does not know architecture {arch}",
        ),
        "why_hash": (
            "el conversor de llama.cpp no reconoce el pre-tokenizador de este tokenizador BPE (hash "
            "{hash}…: un tokenizador entrenado o ampliado con Aura no está en su lista)",
            "llama.cpp's converter does not recognise this BPE tokenizer's pre-tokeniser (hash {hash}…: "
            "a tokenizer trained or extended with Aura is not in its list)",
        ),
        "why_spm": (
            "el tokenizador es de estilo SentencePiece sin tokenizer.model, que el conversor de llama.cpp necesita",
            "the tokenizer is SentencePiece-style without the tokenizer.model llama.cpp's converter needs",
        ),
        "why_sentencepiece": (
            "el conversor de llama.cpp necesita el paquete sentencepiece (pip install sentencepiece)",
            "llama.cpp's converter needs the sentencepiece package (pip install sentencepiece)",
        ),
        "why_tokenizer": (
            "el conversor de llama.cpp no admite este tokenizador ({kind})",
            "llama.cpp's converter does not take this tokenizer ({kind})",
        ),
        "refused": (
            "El conversor de llama.cpp no puede exportar {path}: {why}. Usa --converter aura (o auto).",
            "llama.cpp's converter cannot export {path}: {why}. Use --converter aura (or auto).",
        ),
        "failed": (
            "El conversor de llama.cpp falló (código {code}):\n{tail}",
            "llama.cpp's converter failed (code {code}):\n{tail}",
        ),
        "failed_fallback": (
            "El conversor de llama.cpp falló (código {code}); escribe el GGUF el escritor de Aura. "
            "Última línea: {last}",
            "llama.cpp's converter failed (code {code}); Aura's writer writes the GGUF. Last line: {last}",
        ),
        "unverified_fallback": (
            "El GGUF del conversor de llama.cpp no pasa la verificación ({why}); escribe el GGUF el escritor de Aura.",
            "llama.cpp's converter's GGUF fails the verification ({why}); Aura's writer writes the GGUF.",
        ),
    },
)

ENV_DIR = "AURA_LLAMA_CPP_DIR"
PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
SDIST_ROOT = "vendor/llama.cpp"  # where the converter lies inside llama-cpp-python's sdist
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")  # --outtype values the converter writes itself


@dataclass
class Choice:
    """Which writer exports the model: ``converter`` is llama.cpp's folder, or None for Aura's writer."""

    converter: Path | None
    why: str = ""  # why Aura's writer, when it is


def llama_cpp_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None


def cache_dir(version: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "aura" / "llama.cpp" / version


def _missing(path: Path) -> str | None:
    return next((p for p in PARTS if not (path / p).exists()), None)


def locate(flag_dir: str = "", *, fetch: bool = False) -> Path | None:
    """llama.cpp's converter folder: ``--llama-cpp-dir``, ``$AURA_LLAMA_CPP_DIR``, Aura's cache (filled from
    the installed llama-cpp-python's sdist when ``fetch``), or None. A folder given that lacks it is refused."""
    for what, given in (("--llama-cpp-dir", flag_dir), (ENV_DIR, os.environ.get(ENV_DIR, ""))):
        if given:
            path = Path(given).expanduser().resolve()
            missing = _missing(path)
            if missing:
                raise AuraError(M("bad_dir", what=what, path=path, missing=missing))
            return path
    version = llama_cpp_version()
    if version is None:
        if fetch:
            raise AuraError(M("no_llama_cpp"))
        return None
    cached = cache_dir(version)
    if not _missing(cached):
        return cached
    return _fetch(version, cached) if fetch else None


def _fetch(version: str, dest: Path) -> Path:
    """Download llama-cpp-python VERSION's sdist with pip (the user's index and proxy settings) and keep only
    the converter's parts, renamed into place in one step so that an interrupted fetch leaves nothing."""
    import tarfile

    from aura.core.atomic import TMP_PREFIX, fsync_dir

    console.info(M("fetching", version=version, path=dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=TMP_PREFIX, dir=dest.parent) as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
                tmp,
                f"llama-cpp-python=={version}",
            ],
            capture_output=True,
            text=True,
        )
        sdists = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if proc.returncode != 0 or not sdists:
            why = (proc.stderr.strip().splitlines() or [f"pip {proc.returncode}"])[-1]
            raise AuraError(M("fetch_failed", version=version, why=why[-300:]))
        staged = Path(tmp) / "llama.cpp"
        with tarfile.open(sdists[0]) as tar:
            top = tar.getmembers()[0].name.split("/")[0]
            prefix = f"{top}/{SDIST_ROOT}/"
            members = []
            for m in tar.getmembers():
                rel = m.name[len(prefix) :] if m.name.startswith(prefix) else ""
                if rel and rel.split("/")[0] in PARTS and ".." not in rel.split("/") and (m.isfile() or m.isdir()):
                    m.name = rel
                    members.append(m)
            # Python's "data" filter where it exists (3.10.12+, 3.11.4+); the members are plain files anyway
            tar.extractall(staged, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        if _missing(staged):
            raise AuraError(M("fetch_failed", version=version, why=f"{_missing(staged)} not in {sdists[0].name}"))
        with contextlib.suppress(OSError):  # another export may have put it there meanwhile: theirs is as good
            os.replace(staged, dest)
        fsync_dir(dest.parent)
    return dest


def known_architectures(converter: Path) -> set[str]:
    """The Hugging Face architectures the converter registers (``@ModelBase.register("...", ...)``)."""
    names: set[str] = set()
    for py in sorted((converter / "conversion").glob("*.py")):
        for call in re.findall(r"ModelBase\.register\(([^)]*)\)", py.read_text(encoding="utf-8")):
            names.update(re.findall(r"[\"']([A-Za-z0-9_]+)[\"']", call))
    return names


def _pre_tokenizer_table(converter: Path) -> tuple[str, set[str]]:
    """(the text the converter hashes, the hashes it knows), read from its ``get_vocab_base_pre``."""
    source = (converter / "conversion" / "base.py").read_text(encoding="utf-8")
    text = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_vocab_base_pre":
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "chktxt":
                    text = ast.literal_eval(stmt.value)
                    break
    return text or "", set(re.findall(r'chkhsh == "([0-9a-f]{64})"', source))


def pre_tokenizer_hash(tok_dir: Path, converter: Path) -> tuple[str, bool]:
    """The converter's pre-tokeniser hash of ``tok_dir``'s tokenizer (computed as it computes it: the token
    ids of its probe text through ``AutoTokenizer``) and whether it knows it."""
    from transformers import AutoTokenizer

    text, known = _pre_tokenizer_table(converter)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    digest = sha256(str(tok.encode(text)).encode()).hexdigest()
    return digest, digest in known


def _tokenizer_why(tok_dir: Path, converter: Path) -> str:
    """Empty when the converter takes ``tok_dir``'s tokenizer, else why not."""
    import json

    if (tok_dir / "tokenizer.model").is_file():
        return ""
    path = tok_dir / "tokenizer.json"
    if not path.is_file():
        return M("why_tokenizer", kind="no tokenizer.json")
    model = json.loads(path.read_text(encoding="utf-8")).get("model", {})
    if model.get("type") != "BPE":
        return M("why_tokenizer", kind=model.get("type"))
    if model.get("byte_fallback"):
        return M("why_spm")
    digest, known = pre_tokenizer_hash(tok_dir, converter)
    return "" if known else M("why_hash", hash=digest[:12])


def choose(mode: str, *, model_dir: Path, tok_dir: Path, config: dict, llama_cpp_dir: str = "") -> Choice:
    """The writer for ``--converter MODE`` (auto | aura | llama.cpp); raises for llama.cpp when it cannot."""
    if mode == "aura":
        return Choice(None)
    converter = locate(llama_cpp_dir, fetch=mode == "llama.cpp")
    if converter is None:
        return Choice(None, M("why_absent"))
    from importlib.util import find_spec

    arch = (config.get("architectures") or ["?"])[0]
    if find_spec("sentencepiece") is None:  # the converter imports it for every tokenizer, even a BPE
        why = M("why_sentencepiece")
    elif arch not in known_architectures(converter):
        why = M("why_arch", arch=arch)
    else:
        why = _tokenizer_why(tok_dir, converter)
    if why and mode == "llama.cpp":
        raise AuraError(M("refused", path=model_dir, why=why))
    return Choice(None, why) if why else Choice(converter)


def convert(converter: Path, *, model_dir: Path, out: Path, outtype: str, name: str) -> None:
    """Run ``convert_hf_to_gguf.py`` (its own ``gguf-py``, Aura's Python) writing ``out``; AuraError with the
    end of its log when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # its gguf-py, not the installed one
    cmd = [
        sys.executable,
        str(converter / "convert_hf_to_gguf.py"),
        str(model_dir.resolve()),
        "--outfile",
        str(out.resolve()),
        "--outtype",
        outtype,
        "--model-name",
        name,
    ]
    proc = subprocess.run(cmd, cwd=converter, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        raise ConverterFailed(proc.returncode, (proc.stdout + proc.stderr).strip())


class ConverterFailed(AuraError):
    def __init__(self, code: int, log: str):
        self.code, self.log = code, log
        tail = "\n".join(log.splitlines()[-8:])
        super().__init__(M("failed", code=code, tail=tail))

    def fallback_message(self) -> str:
        return M("failed_fallback", code=self.code, last=(self.log.splitlines() or [""])[-1][-300:])


def copied_model_dir(model_dir: Path, tok_dir: Path, into: Path) -> Path:
    """``model_dir`` as the converter wants it, with the tokenizer files beside the weights: a checkpoint's
    tokenizer lives in its run folder, so its files are linked (or copied) into a temporary folder."""
    if tok_dir.resolve() == model_dir.resolve():
        return model_dir
    into.mkdir(parents=True, exist_ok=True)
    for src in [*model_dir.iterdir(), *tok_dir.iterdir()]:
        dst = into / src.name
        if src.is_file() and not dst.exists():
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
    return into

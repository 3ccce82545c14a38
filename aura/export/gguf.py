"""``aura export gguf``: a Hugging Face model dir -> one GGUF file for llama.cpp / Ollama, proven in llama.cpp.

Everything that can refuse (architecture, tokenizer, vocabulary size, quantiser, llama.cpp for the
verification) is checked before a byte is written. The file is built under a temporary name, verified
there (see ``gguf_verify``) and only then renamed into place, with an Ollama ``NAME.Modelfile`` beside it
(``aura.export.modelfile``).
Two writers: llama.cpp's own converter (``gguf_convert``: ``--converter auto`` picks it when it is on this
machine and knows the architecture and the tokenizer) and Aura's, which writes f32/f16/bf16/q8_0 directly with
the ``gguf`` package (as llama.cpp's converter does). k-quants and the other llama.cpp types go through
llama.cpp's own quantiser from an f32 file, whichever writer wrote it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.export.gguf_convert import ConverterFailed

M = Messages(
    "gguf",
    {
        "bad_quant": (
            "--quant '{quant}' no es válido. Opciones: {choices}.",
            "--quant '{quant}' is not valid. Choices: {choices}.",
        ),
        "bad_converter": (
            "--converter '{converter}' no es válido. Opciones: {choices}.",
            "--converter '{converter}' is not valid. Choices: {choices}.",
        ),
        "no_model": (
            "Falta --model (directorio del modelo Hugging Face).",
            "--model is missing (Hugging Face model dir).",
        ),
        "adapter": (
            "{path} es un adaptador LoRA; fusiónalo primero: aura merge --base-model BASE --adapter "
            "{path} --output-dir FUSIONADO, y exporta FUSIONADO.",
            "{path} is a LoRA adapter; merge it first: aura merge --base-model BASE --adapter {path} "
            "--output-dir MERGED, then export MERGED.",
        ),
        "already_gguf": (
            "{path} ya es un archivo GGUF; --model debe ser un directorio Hugging Face.",
            "{path} is already a GGUF file; --model must be a Hugging Face dir.",
        ),
        "exists": (
            "{path} ya existe; usa --overwrite para sobrescribirlo.",
            "{path} already exists; use --overwrite to overwrite it.",
        ),
        "modelfile_theirs": (
            "{path} ya existe y no es un Modelfile escrito por Aura (o se ha editado): no se "
            "sobrescribe. Exporta en otro --output-dir, o usa --overwrite para reemplazarlo.",
            "{path} already exists and is not a Modelfile written by Aura (or it was edited): "
            "it is not overwritten. Export into another --output-dir, or use --overwrite to "
            "replace it.",
        ),
        "verify_theirs": (
            "{path} ya existe y no lo escribió Aura: no se sobrescribe. Exporta en otro --output-dir, "
            "o usa --overwrite para reemplazarlo.",
            "{path} already exists and Aura did not write it: it is not overwritten. Export into "
            "another --output-dir, or use --overwrite to replace it.",
        ),
        "no_quantizer": (
            "La cuantización {quant} necesita el cuantizador de llama.cpp y no está disponible "
            "(ni 'llama-quantize' en el PATH ni llama-cpp-python). Instala llama-cpp-python "
            "(pip install llama-cpp-python) o usa --quant f16|bf16|q8_0|f32.",
            "Quantisation {quant} needs llama.cpp's quantiser, which is not available (no "
            "'llama-quantize' on PATH, no llama-cpp-python). Install llama-cpp-python (pip "
            "install llama-cpp-python) or use --quant f16|bf16|q8_0|f32.",
        ),
        "verify_needs": (
            "--verify necesita llama-cpp-python. {install} O usa --no-verify.",
            "--verify needs llama-cpp-python. {install} Or use --no-verify.",
        ),
        "no_verify": (
            "llama-cpp-python no está instalado: el GGUF no se verificará en llama.cpp. {install} "
            "--no-verify exporta sin verificar y sin este aviso.",
            "llama-cpp-python is not installed: the GGUF will not be verified in llama.cpp. {install} "
            "--no-verify exports without verifying and without this warning.",
        ),
        "install_verifier": (
            'Para verificarlo, instala el extra de Aura: pip install -e ".[llamacpp]" en su '
            'carpeta (o pip install "llama-cpp-python>=0.3.16"); compila llama.cpp desde el '
            "código fuente: medido 29 minutos en una máquina de 2 núcleos ocupada, 16 minutos de "
            "CPU.",
            'To verify it, install Aura\'s extra: pip install -e ".[llamacpp]" in its folder (or '
            'pip install "llama-cpp-python>=0.3.16"); it compiles llama.cpp from source: measured '
            "29 minutes on a busy 2-core machine, 16 CPU-minutes.",
        ),
        "verify_later": (
            "El GGUF no está verificado en llama.cpp ({why}). Para verificarlo después: {command}",
            "The GGUF is not verified in llama.cpp ({why}). To verify it later: {command}",
        ),
        "why_no_llama_cpp": ("falta llama-cpp-python", "llama-cpp-python is missing"),
        "why_no_verify": ("--no-verify", "--no-verify"),
        "verify_only_missing": (
            "--verify-only {path}: el archivo no existe.",
            "--verify-only {path}: the file does not exist.",
        ),
        "verify_only_model": (
            "--verify-only {path}: falta --model (el directorio Hugging Face del que se exportó) y "
            "no hay un {record} de Aura que lo diga.",
            "--verify-only {path}: --model is missing (the Hugging Face dir it was exported from) and "
            "there is no Aura {record} that names it.",
        ),
        "verify_only_needs": (
            "--verify-only necesita llama-cpp-python. {install}",
            "--verify-only needs llama-cpp-python. {install}",
        ),
        "verified": ("Verificado: {path}; cifras en {record}.", "Verified: {path}; figures in {record}."),
        "padded": (
            "El tokenizador tiene {tokens:token|tokens} y el modelo {rows:fila|filas} de embeddings: se añaden "
            "{pad:token reservado|tokens reservados} sin uso.",
            "The tokenizer has {tokens:token|tokens} and the model {rows} embedding rows: {pad} unused "
            "reserved tokens are added.",
        ),
        "q8_fallback": (
            "Tensores con filas no divisibles por 32 que quedan en F16 (Q8_0 lo exige): {n}.",
            "Tensors with rows not divisible by 32 that stay F16 (Q8_0 requires it): {n}.",
        ),
        "quant_failed": (
            "El cuantizador de llama.cpp falló ({how}, código {code}).",
            "llama.cpp's quantiser failed ({how}, code {code}).",
        ),
        "writing": ("Escribiendo {path} ({quant}, arquitectura {arch})…", "Writing {path} ({quant}, arch {arch})…"),
        "done": (
            "GGUF listo: {path} ({size}, {seconds:.1f} s). Modelfile de Ollama: {modelfile}",
            "GGUF ready: {path} ({size}, {seconds:.1f} s). Ollama Modelfile: {modelfile}",
        ),
        "ollama": (
            "Para usarlo en Ollama: cd {dir} && ollama create {name} -f {modelfile} && ollama run {name}",
            "To use it in Ollama: cd {dir} && ollama create {name} -f {modelfile} && ollama run {name}",
        ),
    },
)

NATIVE = ("f32", "f16", "bf16", "q8_0")
# llama.cpp file types (llama_ftype) reachable only through its quantiser
LLAMA_CPP_QUANTS = {
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 8,
    "q5_1": 9,
    "q2_k": 10,
    "q3_k_s": 11,
    "q3_k_m": 12,
    "q3_k_l": 13,
    "q4_k_s": 14,
    "q4_k_m": 15,
    "q5_k_s": 16,
    "q5_k_m": 17,
    "q6_k": 18,
}
QUANTS = (*NATIVE, *LLAMA_CPP_QUANTS)
CONVERTERS = ("auto", "aura", "llama.cpp")


@dataclass
class GGUFConfig:
    model: str = arg(
        "",
        es="Directorio del modelo Hugging Face (p. ej. RUN/final o un modelo fusionado).",
        en="Hugging Face model dir (e.g. RUN/final or a merged model).",
    )
    outfile: str = arg(
        "",
        es="Archivo GGUF de salida (por defecto model-QUANT.gguf en --output-dir).",
        en="Output GGUF file (default model-QUANT.gguf in --output-dir).",
    )
    output_dir: str = arg(
        "",
        es="Directorio de salida (por defecto el del --outfile, o MODELO-gguf).",
        en="Output dir (default the --outfile's dir, or MODEL-gguf).",
    )
    quant: str = arg(
        "f16",
        es="Tipo: f32, f16, bf16, q8_0 (y q4_k_m, q5_k_m, q6_k… con llama.cpp).",
        en="Type: f32, f16, bf16, q8_0 (and q4_k_m, q5_k_m, q6_k… with llama.cpp).",
        choices=QUANTS,
    )
    verify: bool | None = arg(
        None,
        es="Verificar en llama.cpp (por defecto sí si llama-cpp-python está instalado).",
        en="Verify in llama.cpp (default: yes when llama-cpp-python is installed).",
    )
    name: str = arg(
        "",
        es="Nombre del modelo dentro del GGUF (por defecto el del directorio).",
        en="Model name inside the GGUF (default: the dir's name).",
    )
    overwrite: bool = arg(
        False, es="Sobrescribir el archivo si existe.", en="Overwrite the file if it exists.", deprecated=["--force"]
    )
    converter: str = arg(
        "auto",
        es="Quién escribe el GGUF: auto (el conversor de llama.cpp si está en esta máquina "
        "y conoce la arquitectura y el tokenizador; si no, el de Aura), aura, o "
        "llama.cpp (lo descarga una vez del sdist de llama-cpp-python si falta).",
        en="Who writes the GGUF: auto (llama.cpp's converter when it is on this machine and knows "
        "the architecture and the tokenizer; else Aura's), aura, or llama.cpp (downloaded "
        "once from llama-cpp-python's sdist when missing).",
        choices=CONVERTERS,
    )
    llama_cpp_dir: str = arg(
        "",
        es="Clon de llama.cpp cuyo convert_hf_to_gguf.py usar (o la variable "
        "AURA_LLAMA_CPP_DIR); por defecto, el del sdist de la llama-cpp-python instalada.",
        en="llama.cpp clone whose convert_hf_to_gguf.py to use (or the AURA_LLAMA_CPP_DIR "
        "variable); default: the installed llama-cpp-python's sdist's.",
    )

    verify_only: str = arg(
        "",
        es="Solo verificar en llama.cpp este GGUF ya exportado (p. ej. uno que se exportó sin "
        "verificar) y reescribir su NOMBRE.verify.json; el modelo, el de --model o el que "
        "anotó la exportación.",
        en="Only verify this already exported GGUF in llama.cpp (e.g. one exported without "
        "verification) and rewrite its NAME.verify.json; the model is --model's or the one the "
        "export recorded.",
        metavar="FILE",
    )

    def __post_init__(self):
        self.quant = self.quant.lower()
        if self.quant not in QUANTS:
            raise AuraError(M("bad_quant", quant=self.quant, choices=", ".join(QUANTS)))
        if self.converter not in CONVERTERS:
            raise AuraError(M("bad_converter", converter=self.converter, choices=", ".join(CONVERTERS)))
        if not self.model and not self.verify_only:
            raise AuraError(M("no_model"))

    def target(self) -> Path:
        out = Path(self.outfile) if self.outfile else Path(f"model-{self.quant}.gguf")
        if out.is_absolute() or (self.outfile and not self.output_dir):
            return out
        base = Path(self.output_dir) if self.output_dir else Path(str(Path(self.model)) + "-gguf")
        return base / out


def find_quantizer() -> tuple[str, object] | None:
    """("binary", path) or ("library", llama_cpp) for llama.cpp's quantiser, or None."""
    exe = shutil.which("llama-quantize")
    if exe:
        return "binary", exe
    try:
        import llama_cpp
    except ImportError:
        return None
    return ("library", llama_cpp) if hasattr(llama_cpp, "llama_model_quantize") else None


def _llama_cpp_installed() -> bool:
    try:
        import llama_cpp
    except ImportError:
        return False
    return llama_cpp is not None


def verify_command(gguf: Path) -> str:
    """The command that verifies ``gguf`` later (its model is the one its NAME.verify.json records)."""
    import shlex

    return f"aura export gguf --verify-only {shlex.quote(str(gguf))}"


def export_gguf(cfg: GGUFConfig) -> int:
    from aura.core.atomic import check_writable

    if cfg.verify_only:
        return _verify_only(cfg)
    from aura.core.ownership import check_location
    from aura.export.gguf_verify import is_verify_file, verify_path
    from aura.export.modelfile import is_ours, modelfile_path

    # --- every refusal before anything is written ---
    check_writable(cfg.target(), flag="--outfile" if cfg.outfile else "--output-dir")
    out = cfg.target()
    check_location(out, inputs=[cfg.model])
    if (out.exists() or out.is_symlink()) and not cfg.overwrite:
        raise AuraError(M("exists", path=out))
    modelfile = modelfile_path(out)  # one per GGUF: NAME.Modelfile beside NAME.gguf
    if (modelfile.exists() or modelfile.is_symlink()) and not cfg.overwrite and not is_ours(modelfile):
        raise AuraError(M("modelfile_theirs", path=modelfile))
    verified = verify_path(out)
    if (verified.exists() or verified.is_symlink()) and not cfg.overwrite and not is_verify_file(verified):
        raise AuraError(M("verify_theirs", path=verified))
    from aura.core.locks import output_lock

    with output_lock(out, command="export gguf"):  # a second export to ``out`` is refused, naming the first
        return _export(cfg, out, modelfile)


@dataclass
class _ExportPlan:
    """What ``_plan`` decided before a byte is written: the model, who writes its GGUF, and how."""

    model_dir: Path
    hf_arch: str  # config.json's architecture, for the messages
    tok: object  # the model's tokenizer (transformers)
    tok_dir: Path
    choice: object  # gguf_convert.choose's answer: llama.cpp's converter, or None and why not
    arch: object  # Aura's writer's ArchPlan (None when Aura's writer refused: ``refusal``)
    vocab: object  # Aura's writer's VocabPlan (idem)
    refusal: AuraError | None  # why Aura's writer cannot write this model (llama.cpp's converter may)
    quantizer: tuple[str, object] | None  # llama.cpp's quantiser, for the types only it writes
    verify: bool  # verify the file in llama.cpp before it is renamed into place
    written_name: str  # general.name inside the GGUF

    def writers(self, converter: str) -> list[str]:
        """The writers to try in turn. auto: llama.cpp's converter first, Aura's writer if the converter
        fails or its file fails verification."""
        if self.choice.converter is None:
            return ["aura"]
        if converter == "llama.cpp" or self.refusal is not None:
            return ["llama.cpp"]
        return ["llama.cpp", "aura"]


def _export(cfg: GGUFConfig, out: Path, modelfile: Path) -> int:
    """Plan (every refusal), write under a temporary name and verify it there (with the writer fallback),
    publish it (atomic rename and NAME.verify.json), then the Ollama Modelfile beside it."""
    from aura.core.atomic import TMP_PREFIX, human_bytes, owner_suffix, tmp_name

    plan = _plan(cfg, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    console.info(
        M(
            "writing",
            path=out,
            quant=cfg.quant,
            arch=f"{plan.hf_arch} -> {plan.arch.gguf_arch if plan.choice.converter is None else 'llama.cpp'}",
        )
    )
    fd, name = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{out.name}.", suffix=owner_suffix(), dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    stage = None
    try:
        # a quantised type is written as f32 beside the temporary file first, then quantised into it
        stage = out.parent / tmp_name(f"{out.name}.f32") if plan.quantizer else tmp
        writer, report, seconds = _write_verified(cfg, plan, tmp=tmp, stage=stage, shown=out, t0=t0)
        _publish(cfg, plan, tmp=tmp, out=out, writer=writer, report=report)
    finally:
        for p in (tmp, stage):
            if p is not None:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
    name = _write_modelfile(cfg, plan, modelfile=modelfile, gguf_name=out.name)
    console.success(M("done", path=out, size=human_bytes(out.stat().st_size), seconds=seconds, modelfile=modelfile))
    console.info(M("ollama", dir=out.parent, name=name, modelfile=modelfile.name))
    if not plan.verify:
        why = M("why_no_verify") if cfg.verify is False else M("why_no_llama_cpp")
        (console.info if cfg.verify is False else console.warn)(M("verify_later", why=why, command=verify_command(out)))
    return 0


def _plan(cfg: GGUFConfig, out: Path) -> _ExportPlan:
    """Resolve the model and decide the writers, the quantiser and the verification; the refusals that need
    the model (``export_gguf`` made those about the output) are raised here, before anything is written."""
    from aura.core.ownership import check_location
    from aura.export.gguf_arch import plan_arch
    from aura.export.gguf_convert import M as M_CONVERT, choose
    from aura.export.gguf_tokenizer import general_name, plan_vocab, rstrip_special
    from aura.inference.loading import find_tokenizer_dir, load_model_tokenizer, read_json_file, resolve_model

    source = resolve_model(cfg.model)
    if source.kind == "adapter":
        raise AuraError(M("adapter", path=source.path))
    if source.kind == "gguf":
        raise AuraError(M("already_gguf", path=source.path))
    model_dir = source.path
    config = read_json_file(model_dir / "config.json")
    tok = load_model_tokenizer(model_dir)
    tok_dir = find_tokenizer_dir(model_dir)
    choice = choose(cfg.converter, model_dir=model_dir, tok_dir=tok_dir, config=config, llama_cpp_dir=cfg.llama_cpp_dir)
    arch = vocab = refusal = None
    try:  # Aura's writer's plan: what it writes, or the fallback should llama.cpp's converter fail
        arch = plan_arch(model_dir, config)
        vocab = plan_vocab(tok_dir, tok, arch.n_vocab)
    except AuraError as e:
        refusal = e
    if choice.converter is None:
        if choice.why:
            console.info(M_CONVERT("fallback", why=choice.why))
        if refusal is not None:
            raise refusal
    else:
        console.info(M_CONVERT("using", path=choice.converter))
    quantizer = None
    if cfg.quant not in NATIVE:
        quantizer = find_quantizer()
        if quantizer is None:
            raise AuraError(M("no_quantizer", quant=cfg.quant))
    verify = cfg.verify
    if verify is None:
        verify = _llama_cpp_installed()
        if not verify:
            console.warn(M("no_verify", install=M("install_verifier")))
    elif verify and not _llama_cpp_installed():
        raise AuraError(M("verify_needs", install=M("install_verifier")))
    check_location(out, inputs=[model_dir])  # as resolved
    hf_arch = (config.get("architectures") or ["?"])[0]
    written_name = general_name(
        cfg.name or model_dir.resolve().name,
        phi3=hf_arch == "Phi3ForCausalLM",
        vocab=tok.get_vocab(),
        path=tok_dir,
        rstrip_special=vocab.rstrip_special if vocab is not None else rstrip_special(tok_dir),
    )
    if choice.converter is None and vocab.n_padded:
        console.warn(M("padded", tokens=arch.n_vocab - vocab.n_padded, rows=arch.n_vocab, pad=vocab.n_padded))
    return _ExportPlan(
        model_dir=model_dir,
        hf_arch=hf_arch,
        tok=tok,
        tok_dir=tok_dir,
        choice=choice,
        arch=arch,
        vocab=vocab,
        refusal=refusal,
        quantizer=quantizer,
        verify=verify,
        written_name=written_name,
    )


def _write_verified(
    cfg: GGUFConfig, plan: _ExportPlan, *, tmp: Path, stage: Path, shown: Path, t0: float
) -> tuple[str, object, float]:
    """The writer fallback: each of the plan's writers in turn until one's file is written and passes the
    verification; an earlier writer's failure is said and the next one tried, the last one's is raised.
    Returns that writer, the verification's report (None when not verifying) and the writing's seconds."""
    from aura.export.gguf_convert import M as M_CONVERT

    *earlier, last = plan.writers(cfg.converter)
    for writer in earlier:
        try:
            return (writer, *_write_one(cfg, plan, writer, tmp=tmp, stage=stage, shown=shown, t0=t0))
        except AuraError as e:
            console.warn(
                e.fallback_message()
                if isinstance(e, ConverterFailed)
                else M_CONVERT("unverified_fallback", why=str(e).splitlines()[0][:300])
            )
    return (last, *_write_one(cfg, plan, last, tmp=tmp, stage=stage, shown=shown, t0=t0))


def _write_one(
    cfg: GGUFConfig, plan: _ExportPlan, writer: str, *, tmp: Path, stage: Path, shown: Path, t0: float
) -> tuple[object, float]:
    """``writer`` writes the GGUF at ``tmp`` (through ``stage`` and llama.cpp's quantiser for the types only it
    writes), then the file is verified there when the plan says so; returns (report or None, seconds written)."""
    first = "f32" if plan.quantizer else cfg.quant
    if writer == "llama.cpp":
        _convert(
            plan.choice.converter,
            stage,
            model_dir=plan.model_dir,
            tok_dir=plan.tok_dir,
            quant=first,
            name=plan.written_name,
        )
    else:
        _write(
            stage,
            model_dir=plan.model_dir,
            arch=plan.arch,
            vocab=plan.vocab,
            tok=plan.tok,
            tok_dir=plan.tok_dir,
            quant=first,
            name=plan.written_name,
        )
    if plan.quantizer:
        _quantize(plan.quantizer, stage, tmp, LLAMA_CPP_QUANTS[cfg.quant])
        stage.unlink()
    seconds = time.perf_counter() - t0
    if not plan.verify:
        return None, seconds
    from aura.export.gguf_verify import verify_gguf

    return verify_gguf(tmp, model_dir=plan.model_dir, quant=cfg.quant, shown=shown), seconds


def _publish(cfg: GGUFConfig, plan: _ExportPlan, *, tmp: Path, out: Path, writer: str, report) -> None:
    """Rename the written file into place (synced, readable as the user's files are) and write its
    NAME.verify.json: the verification's figures, or why it is not verified and the command that verifies it."""
    from aura.core.atomic import atomic_write_json, fsync_dir, user_mode
    from aura.export.gguf_verify import unverified_record, verify_path, verify_record

    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.chmod(tmp, user_mode(directory=False))  # mkstemp's 0600 would hide the model from other users
    verified = verify_path(out)
    # the old file's figures go first: a GGUF is never shown with another file's verification
    with contextlib.suppress(FileNotFoundError):
        verified.unlink()
    os.replace(tmp, out)
    fsync_dir(out.parent)
    # unverified: said in the record (why, and the command that verifies it later), never old figures
    atomic_write_json(
        verified,
        verify_record(report, gguf=out, quant=cfg.quant, writer=writer, model=plan.model_dir)
        if report is not None
        else unverified_record(
            gguf=out,
            quant=cfg.quant,
            writer=writer,
            model=plan.model_dir,
            reason="no_verify" if cfg.verify is False else "no_llama_cpp",
            command=verify_command(out),
        ),
    )


def _write_modelfile(cfg: GGUFConfig, plan: _ExportPlan, *, modelfile: Path, gguf_name: str) -> str:
    """Ollama's Modelfile for the GGUF ``gguf_name`` beside it (signed as Aura's); returns the model's Ollama name."""
    from aura.core.atomic import atomic_write_text
    from aura.export.modelfile import default_system, modelfile_text, ollama_name, signed
    from aura.inference.loading import end_of_turn_ids

    tok = plan.tok
    stops = [tok.convert_ids_to_tokens(t) for t in end_of_turn_ids(tok)]
    name = ollama_name(plan.model_dir.resolve(), quant=cfg.quant, name=cfg.name)
    atomic_write_text(
        modelfile,
        signed(
            modelfile_text(
                gguf_name=gguf_name,
                chat_template=tok.chat_template,
                stops=stops,
                system=default_system(tok),
                model_name=name,
                modelfile_name=modelfile.name,
            )
        ),
    )
    return name


def _verify_only(cfg: GGUFConfig) -> int:
    """``--verify-only FILE``: the checks of an export on a GGUF already written, and its NAME.verify.json
    rewritten with what they measured (the model: ``--model``, else the one the export recorded)."""
    import json

    from aura.core.atomic import atomic_write_json
    from aura.export.gguf_verify import is_verify_file, verify_gguf, verify_path, verify_record
    from aura.inference.loading import resolve_model

    path = Path(cfg.verify_only)
    if not path.is_file():
        raise AuraError(M("verify_only_missing", path=path))
    record_path = verify_path(path)
    record = {}
    if is_verify_file(record_path):
        record = json.loads(record_path.read_text(encoding="utf-8"))
    elif record_path.exists() or record_path.is_symlink():
        raise AuraError(M("verify_theirs", path=record_path))
    model = cfg.model or record.get("model")
    if not model:
        raise AuraError(M("verify_only_model", path=path, record=record_path.name))
    if not _llama_cpp_installed():
        raise AuraError(M("verify_only_needs", install=M("install_verifier")))
    source = resolve_model(model)
    if source.kind != "hf":
        raise AuraError(M("adapter" if source.kind == "adapter" else "already_gguf", path=source.path))
    quant = record.get("quant") or _file_quant(path) or cfg.quant
    report = verify_gguf(path, model_dir=source.path, quant=quant)
    atomic_write_json(
        record_path,
        verify_record(report, gguf=path, quant=quant, writer=record.get("writer") or "?", model=source.path),
    )
    console.success(M("verified", path=path, record=record_path))
    return 0


def _file_quant(path: Path) -> str | None:
    """The quantisation a GGUF's ``general.file_type`` says, when it is one Aura names."""
    import gguf

    field = gguf.GGUFReader(str(path)).get_field("general.file_type")
    if field is None:
        return None
    ftype = int(field.contents())
    names = {
        int(gguf.LlamaFileType.ALL_F32): "f32",
        int(gguf.LlamaFileType.MOSTLY_F16): "f16",
        int(gguf.LlamaFileType.MOSTLY_BF16): "bf16",
        int(gguf.LlamaFileType.MOSTLY_Q8_0): "q8_0",
        **{v: k for k, v in LLAMA_CPP_QUANTS.items()},
    }
    return names.get(ftype)


def _convert(converter: Path, path: Path, *, model_dir: Path, tok_dir: Path, quant: str, name: str) -> None:
    """llama.cpp's converter writes ``path``; a checkpoint's tokenizer (in its run folder) is put beside the
    weights in a temporary folder first, as the converter reads both from one folder."""
    from aura.core.atomic import TMP_PREFIX
    from aura.export.gguf_convert import convert, copied_model_dir

    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}convert-", dir=path.parent) as tmp:
        src = copied_model_dir(model_dir, tok_dir, Path(tmp) / model_dir.resolve().name)
        convert(converter, model_dir=src, out=path, outtype=quant, name=name)


def _write(path: Path, *, model_dir: Path, arch, vocab, tok, tok_dir: Path, quant: str, name: str) -> None:
    import gguf
    import numpy as np

    from aura.export.gguf_arch import iter_tensors, write_hparams
    from aura.export.gguf_tokenizer import write_vocab
    from aura.inference.loading import weight_files

    qtype = {
        "f32": gguf.GGMLQuantizationType.F32,
        "f16": gguf.GGMLQuantizationType.F16,
        "bf16": gguf.GGMLQuantizationType.BF16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
    }[quant]
    ftype = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "bf16": gguf.LlamaFileType.MOSTLY_BF16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }[quant]
    files = weight_files(model_dir)
    big = sum(f.stat().st_size for f in files) > (2 << 30)
    writer = gguf.GGUFWriter(str(path), arch.gguf_arch, use_temp_file=big)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)  # already llama.cpp's right name (gguf_tokenizer.general_name)
    writer.add_file_type(ftype)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_hparams(writer, arch)
    write_vocab(writer, vocab, tok_dir, tok, arch=arch.gguf_arch)
    fallback = 0
    for tname, arr in iter_tensors(model_dir, arch, files):
        t = qtype
        # As llama.cpp's converter: 1-D tensors and norms stay F32; Q8_0 needs rows divisible by 32.
        if arr.ndim <= 1 or tname.endswith("_norm.weight"):
            t = gguf.GGMLQuantizationType.F32
        elif t == gguf.GGMLQuantizationType.Q8_0 and arr.shape[-1] % 32:
            t, fallback = gguf.GGMLQuantizationType.F16, fallback + 1
        data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), t)
        writer.add_tensor(tname, data, raw_dtype=t)
    if fallback:
        console.warn(M("q8_fallback", n=fallback))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()


def _quantize(quantizer: tuple[str, object], src: Path, dst: Path, ftype: int) -> None:
    import subprocess

    how, impl = quantizer
    if how == "binary":
        names = {v: k for k, v in LLAMA_CPP_QUANTS.items()}
        proc = subprocess.run([str(impl), str(src), str(dst), names[ftype].upper()], capture_output=True, text=True)
        if proc.returncode != 0:
            raise AuraError(M("quant_failed", how=f"llama-quantize: {proc.stderr[-500:]}", code=proc.returncode))
        return
    import ctypes

    llama_cpp = impl
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = os.cpu_count() or 1
    # llama.cpp prints a line per tensor on the C-level stdout/stderr: keep it for the error only
    with tempfile.TemporaryFile() as log:
        saved = [os.dup(1), os.dup(2)]
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            code = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        if code != 0:
            log.seek(0)
            tail = log.read().decode("utf-8", errors="replace")[-800:]
            raise AuraError(M("quant_failed", how=f"llama_model_quantize: {tail}", code=code))

"""Hostile files against the security rules (docs/security.en.md): locks and markers planted as links, a
crafted DCP pickle, traversal paths in meta.json and a safetensors index, links out of a checkpoint or a
tokenizer, a link loop, task files that would run code or shadow aura-es. The assertions that the victim
is untouched live in tests/test_security.py and tests/test_security_inputs.py; here each is one case of
the bad-input tally."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np

from tests.bad_inputs import case
from tests.bad_inputs.hostile import (
    RESUME_OUT,
    copy,
    damaged_data,
    damaged_model,
    docs,
    pretrain_args,
    resume_args,
    write,
)


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def _tok_with(fx, tmp: Path, plant) -> list[str]:
    tok = copy(fx.tokenizer, tmp / "tok")
    plant(tok)
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tok),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_tokenizer_link_out", "data prepare", "notas.txt", hostile=True)
def _(fx, tmp):
    secret = write(tmp / "secreto.txt", "clave\n")
    return _tok_with(fx, tmp, lambda tok: (tok / "notas.txt").symlink_to(secret))


@case("prepare_tokenizer_link_loop", "data prepare", "/tok/", hostile=True)
def _(fx, tmp):
    def plant(tok):
        (tok / "a").symlink_to(tok / "b")
        (tok / "b").symlink_to(tok / "a")

    return _tok_with(fx, tmp, plant)


def _first_shard(meta: dict) -> dict:
    return meta["splits"]["train"]["shards"][0]


@case("pretrain_meta_shard_dotdot", "pretrain", "meta.json", hostile=True)
def _(fx, tmp):
    return pretrain_args(
        fx, tmp, data=damaged_data(fx, tmp, lambda m: (_first_shard(m).update(file="../../x.bin"), m)[1])
    )


@case("pretrain_meta_shard_absolute", "pretrain", "meta.json", hostile=True)
def _(fx, tmp):
    return pretrain_args(
        fx, tmp, data=damaged_data(fx, tmp, lambda m: (_first_shard(m).update(file="/etc/hostname"), m)[1])
    )


# Ids are checked when a shard is first read (one max() per shard, not a pass over the whole dataset at
# start): the run has begun, so its run.json (status "failed") stays; no checkpoint or final/ does.
@case(
    "pretrain_shard_ids_beyond_vocab",
    "pretrain",
    "train_00000.bin",
    outputs=("out/final", "out/checkpoint-*"),
    hostile=True,
)
def _(fx, tmp):
    data = damaged_data(fx, tmp)
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    shard = data / _first_shard(meta)["file"]
    ids = np.fromfile(shard, dtype=meta["dtype"])
    ids[:] = meta["tokenizer"]["vocab_size"] + 3
    ids.tofile(shard)
    return pretrain_args(fx, tmp, data=data)


@case("resume_run_lock_symlink", "pretrain", ".aura-run.lock", outputs=RESUME_OUT, hostile=True)
def _(fx, tmp):
    victim = write(tmp / "victima.txt", "datos\n")

    def plant(ck: Path):
        lock = ck.parent / ".aura-run.lock"
        lock.unlink(missing_ok=True)
        lock.symlink_to(victim)

    return resume_args(fx, tmp, plant)


@case("resume_dcp_metadata_pickle", "pretrain", ".metadata", outputs=RESUME_OUT, hostile=True)
def _(fx, tmp):
    def plant(ck: Path):
        (ck / "model.safetensors").unlink()
        write(ck / "dcp" / ".metadata", pickle.dumps(_Payload()))

    return [*resume_args(fx, tmp, plant), "--load-sharded"]


@case("resume_checkpoint_link_out", "pretrain", "optimizer.pt", outputs=RESUME_OUT, hostile=True)
def _(fx, tmp):
    def plant(ck: Path):
        outside = tmp / "optimizer-ajeno.pt"
        (ck / "optimizer.pt").rename(outside)
        (ck / "optimizer.pt").symlink_to(outside)

    return resume_args(fx, tmp, plant)


@case("generate_index_traversal", "generate", "model.safetensors.index.json", hostile=True)
def _(fx, tmp):
    def plant(model: Path):
        names = {"model.embed_tokens.weight": "../../../etc/passwd"}
        write(model / "model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": names}))

    return ["generate", "--model", str(damaged_model(fx, tmp, plant)), "--prompt", "Hola", "--max-new-tokens", "2"]


def _task(tmp: Path, name: str, extra: str = "") -> Path:
    tasks = tmp / "tareas"
    data = write(tasks / "datos.jsonl", json.dumps({"q": "¿1 + 1?", "o": ["2", "3"], "c": 0}) + "\n")
    write(
        tasks / "tarea.yaml",
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\noutput_type: multiple_choice\ntest_split: test\ndoc_to_text: q\n"
        f"doc_to_choice: o\ndoc_to_target: c\nmetric_list:\n  - metric: acc\n{extra}",
    )
    return tasks


@case("eval_include_shadows_aura_es", "eval", "tarea.yaml", hostile=True)
def _(fx, tmp):
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--tasks",
        "aura_es_lectura",
        "--include-path",
        str(_task(tmp, "aura_es_lectura")),
        "--limit",
        "1",
        "--output-dir",
        str(tmp / "out"),
    ]


@case("eval_include_function_untrusted", "eval", "utils.py", hostile=True)
def _(fx, tmp):
    tasks = _task(tmp, "mi_tarea", "process_docs: !function utils.procesar\n")
    write(tasks / "utils.py", "import os\nos.system('echo pwned')\n\ndef procesar(ds):\n    return ds\n")
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--tasks",
        "mi_tarea",
        "--include-path",
        str(tasks),
        "--limit",
        "1",
        "--output-dir",
        str(tmp / "out"),
    ]

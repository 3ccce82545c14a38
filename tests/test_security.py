"""Nothing a file says may run code or reach outside its folder (issue 24, "Security"): hostile files
built here (a lock or marker symlinked to a victim, a crafted DCP pickle, a concurrent writer), each
refused with a clear message (exit 2, the file named) and the victim untouched. Paths, copies, task
files and memory bounds: tests/test_security_inputs.py."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.test_pretrain import TINY_FLAGS


class _Payload:
    """Unpickling this creates ``flag``: proof that something ran pickle on it."""

    def __init__(self, flag: Path):
        self.flag = str(flag)

    def __reduce__(self):
        return (open, (self.flag, "w"))


def pretrain(data: Path, out: Path, *extra, here: bool = False):
    run = run_aura_here if here else run_aura
    return run("pretrain", "--data", data, "--output-dir", out, *TINY_FLAGS, *extra)


@pytest.fixture(scope="module")
def trained_run(prepared_corpus, tmp_path_factory) -> Path:
    """A finished 2-step run with checkpoint-step-2 (copied by the tests that change it)."""
    run = tmp_path_factory.mktemp("secrun") / "run"
    r = pretrain(prepared_corpus, run, "--max-steps", "2", "--save-steps", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    return run


def copy_run(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest, symlinks=True)
    return dest


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- 1. locks and markers are never followed through a link --------------------------------------


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_run_lock_planted_as_a_link_is_refused_and_the_victim_untouched(prepared_corpus, trained_run, tmp_path, link):
    run = copy_run(trained_run, tmp_path / "run")
    victim = tmp_path / "victim.txt"
    victim.write_text("datos importantes del usuario\n" * 50, encoding="utf-8")
    before = digest(victim)
    (run / ".aura-run.lock").unlink()
    if link == "symlink":
        (run / ".aura-run.lock").symlink_to(victim)
    else:
        os.link(victim, run / ".aura-run.lock")
    r = pretrain(prepared_corpus, run, "--max-steps", "3", "--resume-from", "latest", here=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert ".aura-run.lock" in r.stderr and "not a regular file" in r.stderr and "Traceback" not in r.stderr
    assert digest(victim) == before


def test_file_lock_never_truncates_and_names_its_holder(tmp_path):
    from aura.core.errors import AuraError
    from aura.core.locks import FileLock, lock_holder

    victim = tmp_path / "victim"
    victim.write_bytes(b"x" * 4096)
    (tmp_path / "l").symlink_to(victim)
    with pytest.raises(AuraError, match="not a regular file"):
        FileLock(tmp_path / "l").acquire()
    assert victim.read_bytes() == b"x" * 4096
    lock = FileLock(tmp_path / "lock")
    assert lock.acquire(job={"id": "a" * 200}) is None
    size = (tmp_path / "lock").stat().st_size
    lock.record["job"] = {"id": "b"}
    lock.write()  # a shorter record: padded in place, the file never shrinks (no truncation)
    assert (tmp_path / "lock").stat().st_size == size and lock_holder(tmp_path / "lock")["job"] == {"id": "b"}
    lock.release()


def test_a_marker_symlinked_from_an_aura_dir_does_not_make_a_users_dir_replaceable(tiny_zoo, tmp_path):
    """A user's folder whose .aura-dir.json is a link to a real Aura data dir's marker: --force must not
    replace it (on the old code it was taken for Aura's and swapped out, the user's files deleted)."""
    src = tmp_path / "docs.txt"
    src.write_text(
        "".join(f"Documento {i} de prueba, bastante largo para el corpus.\n" for i in range(20)), encoding="utf-8"
    )
    aura_dir = tmp_path / "aura-data"
    r = run_aura_here(
        "data", "prepare", src, "--tokenizer", tiny_zoo["tokenizer"], "--output-dir", aura_dir, "--workers", "1"
    )
    assert r.returncode == 0, r.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tesis.md").write_text("mi tesis\n", encoding="utf-8")
    (mine / ".aura-dir.json").symlink_to(aura_dir / ".aura-dir.json")
    r = run_aura_here(
        "data",
        "prepare",
        src,
        "--tokenizer",
        tiny_zoo["tokenizer"],
        "--output-dir",
        mine,
        "--workers",
        "1",
        "--overwrite",
    )
    assert r.returncode == 2 and "was not created by Aura" in r.stderr, r.stdout + r.stderr
    assert (mine / "tesis.md").read_text(encoding="utf-8") == "mi tesis\n"


# ---- 2. an FSDP (DCP) checkpoint cannot run code ---------------------------------------------------


def _dcp_only(run: Path) -> Path:
    ck = run / "checkpoint-step-2"
    import torch
    from transformers import AutoModelForCausalLM

    from aura.distributed import DistInfo
    from aura.distributed.sharded import save_sharded
    from aura.train.optim.step_engine import build_optimizer
    from aura.train.pretrain import PretrainConfig

    model = AutoModelForCausalLM.from_pretrained(ck)
    opt = build_optimizer(model, PretrainConfig(learning_rate=3e-3), torch.device("cpu"))
    opt.load_state_dict(torch.load(ck / "optimizer.pt", weights_only=True))
    save_sharded(ck / "dcp", model=model, optimizer=opt, dist=DistInfo())
    (ck / "model.safetensors").unlink()
    (ck / "optimizer.pt").unlink()
    return ck


def test_crafted_dcp_metadata_is_refused_whatever_the_markers_say(prepared_corpus, trained_run, tmp_path):
    run = copy_run(trained_run, tmp_path / "run")
    ck = _dcp_only(run)
    flag = tmp_path / "pwned"
    (ck / "dcp" / ".metadata").write_bytes(pickle.dumps(_Payload(flag)))
    assert (run / ".aura-dir.json").is_file() and (ck / ".aura-dir.json").is_file()  # markers say "Aura's"
    r = pretrain(prepared_corpus, run, "--max-steps", "3", "--resume-from", "latest", "--load-sharded", here=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dcp/.metadata asks to build" in r.stderr and ".open" in r.stderr and "Traceback" not in r.stderr
    assert not flag.exists()


def test_crafted_dcp_value_and_path_outside_are_refused(trained_run, tmp_path):
    """The two other ways DCP's reader runs or reads what a file says: a non-tensor value (DCP loads it
    with torch.load(weights_only=False)) and a storage file outside the directory."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from transformers import AutoModelForCausalLM

    from aura.core.errors import AuraError
    from aura.distributed import DistInfo
    from aura.distributed.dcp_reader import read_metadata
    from aura.distributed.sharded import load_sharded
    from aura.train.optim.step_engine import build_optimizer
    from aura.train.pretrain import PretrainConfig

    ck = _dcp_only(copy_run(trained_run, tmp_path / "run"))
    dcp_dir = ck / "dcp"
    model = AutoModelForCausalLM.from_pretrained(trained_run / "checkpoint-step-2")
    opt = build_optimizer(model, PretrainConfig(learning_rate=3e-3), torch.device("cpu"))
    load_sharded(dcp_dir, model=model, optimizer=opt, dist=DistInfo())  # the genuine one loads
    genuine = (dcp_dir / ".metadata").read_bytes()

    flag = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save(_Payload(flag), buf)
    (dcp_dir / "__evil.distcp").write_bytes(buf.getvalue())
    md = read_metadata(dcp_dir / ".metadata")
    key = next(k for k in md.storage_data if k.fqn.endswith("param_groups.0.lr"))
    md.storage_data[key] = _StorageInfo(relative_path="__evil.distcp", offset=0, length=len(buf.getvalue()))
    (dcp_dir / ".metadata").write_bytes(pickle.dumps(md))
    with pytest.raises(AuraError, match="param_groups.0.lr.*not plain data"):
        load_sharded(dcp_dir, model=model, optimizer=opt, dist=DistInfo())
    assert not flag.exists()

    (dcp_dir / ".metadata").write_bytes(genuine)
    md = read_metadata(dcp_dir / ".metadata")
    key = next(iter(md.storage_data))
    info = md.storage_data[key]
    md.storage_data[key] = _StorageInfo(
        relative_path=f"../../{info.relative_path}", offset=info.offset, length=info.length
    )
    (dcp_dir / ".metadata").write_bytes(pickle.dumps(md))
    with pytest.raises(AuraError, match="outside the checkpoint directory"):
        load_sharded(dcp_dir, model=model, optimizer=opt, dist=DistInfo())


# ---- 7. one writer per output ----------------------------------------------------------------------


def test_second_data_prepare_into_one_folder_is_refused_with_the_first_pid(tiny_zoo, spanish_text, tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text((spanish_text + "\n") * 40, encoding="utf-8")
    out = tmp_path / "data"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aura",
            "data",
            "prepare",
            str(src),
            "--tokenizer",
            str(tiny_zoo["tokenizer"]),
            "--output-dir",
            str(out),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    from aura.core.locks import lock_holder, lock_path

    try:
        deadline = time.time() + 120
        while lock_holder(lock_path(out)) is None and first.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)  # hold it while it holds the lock
        assert first.poll() is None, "the first prepare ended before the test could stop it"
        second = run_aura_here(
            "data", "prepare", src, "--tokenizer", tiny_zoo["tokenizer"], "--output-dir", out, "--workers", "1"
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {first.pid} on " in second.stderr and str(out) in second.stderr
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    assert (out / "meta.json").is_file() and not lock_path(out).exists()


_HOLD = textwrap.dedent("""
    import sys, time
    from aura.core.locks import output_lock
    with output_lock(sys.argv[1], command="test"):
        print("held", flush=True)
        time.sleep(120)
""")


@pytest.mark.parametrize("command", ["merge", "export"])
def test_second_merge_or_export_into_one_output_is_refused(tiny_zoo, tiny_adapter, tmp_path, command):
    out = tmp_path / ("merged" if command == "merge" else "model.gguf")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        if command == "merge":
            r = run_aura_here(
                "merge", "--base-model", tiny_zoo["llama"], "--adapter", tiny_adapter, "--output-dir", out
            )
        else:
            r = run_aura_here("export", "gguf", "--model", tiny_zoo["llama"], "--outfile", out, "--quant", "f16")
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"pid {holder.pid} on " in r.stderr and "Traceback" not in r.stderr
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()

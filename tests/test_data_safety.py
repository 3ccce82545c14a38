"""Reliability bench: nothing of the user's is ever deleted, whatever the flags.

Each case builds a directory of a user's unrelated files (random bytes, nested folders, a ``.git``),
points a real ``aura`` command at it the way a hurried user might (as the output, with ``--overwrite``,
beside a concurrent run) and checks that every byte survives. The rule behind it is in
docs/architecture.md ("What Aura replaces, and when").
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aura.core import atomic as fsutil, ownership
from tests.conftest import run_aura, run_aura_here
from tests.tiny_models import CORPUS_DIR, build_llama, make_lora_adapter, train_tokenizer

TINY = [
    "--model-preset",
    "manual",
    "--embed-size",
    "32",
    "--num-layers",
    "1",
    "--num-heads",
    "2",
    "--seq-length",
    "16",
    "--intermediate-size",
    "64",
    "--batch-size",
    "2",
    "--max-steps",
    "1",
    "--sample-tokens",
    "0",
]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    tok = train_tokenizer(root / "tok", vocab_size=400)
    base = build_llama(root / "base", tok, hidden=32, layers=1)
    run = root / "run"
    adapter = make_lora_adapter(base, run / "final")
    corpus = root / "corpus.txt"
    corpus.write_text(
        (CORPUS_DIR / sorted(p.name for p in CORPUS_DIR.glob("*.txt"))[0]).read_text("utf-8"), encoding="utf-8"
    )
    return {"tok": tok, "base": base, "adapter": adapter, "run": run, "corpus": corpus}


def user_project(path: Path, *, meta: dict | None = None) -> Path:
    """A user's own project: a meta.json of theirs, code, a .git, nested binary data."""
    rnd = os.urandom
    (path / ".git" / "objects" / "ab").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (path / ".git" / "objects" / "ab" / "cdef0123").write_bytes(rnd(3000))
    (path / "deep" / "er").mkdir(parents=True)
    (path / "deep" / "er" / "blob.bin").write_bytes(rnd(10_000))
    (path / "main.py").write_text("print('mi proyecto')\n", encoding="utf-8")
    (path / "meta.json").write_text(json.dumps(meta or {"name": "mi-app", "version": 3}), encoding="utf-8")
    (path / "tokenizer.json").write_text('{"mine": true}', encoding="utf-8")
    return path


def tree(path: Path) -> dict[str, str]:
    """Every file and folder under ``path`` -> sha256 of its bytes ("dir" for folders)."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def refused(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def aura_with_umask(*args, umask: int, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    return subprocess.run(
        [sys.executable, "-m", "aura", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        preexec_fn=lambda: os.umask(umask),
        timeout=600,
    )


def here_with_umask(*args, umask: int) -> subprocess.CompletedProcess:
    """``run_aura_here`` under ``umask`` (the process's, restored after): for commands that only read a
    model, where a new interpreter would add its ~5 s of imports and prove nothing more."""
    old = os.umask(umask)
    try:
        return run_aura_here(*args)
    finally:
        os.umask(old)


# ---- aura data prepare ---------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
def test_prepare_never_replaces_a_project_with_a_meta_json(zoo, tmp_path, force):
    proj = user_project(tmp_path / "proj")
    before = tree(proj)
    r = run_aura_here(
        "data",
        "prepare",
        zoo["corpus"],
        "--tokenizer",
        zoo["tok"],
        "--output-dir",
        proj,
        "--workers",
        "1",
        *(["--overwrite"] if force else []),
    )
    refused(r, "was not created by Aura")
    assert tree(proj) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # no staging dir was even started


def test_prepare_never_replaces_an_aura_looking_meta_beside_user_files(zoo, tmp_path):
    proj = user_project(tmp_path / "proj", meta={"format": "aura-tokens-v1", "aura_version": "0.1"})
    before = tree(proj)
    refused(
        run_aura_here(
            "data",
            "prepare",
            zoo["corpus"],
            "--tokenizer",
            zoo["tok"],
            "--output-dir",
            proj,
            "--workers",
            "1",
            "--overwrite",
        ),
        "was not created by Aura",
    )
    assert tree(proj) == before


def test_unreadable_meta_in_an_aura_data_dir_is_not_taken_as_empty(zoo, tmp_path):
    out = tmp_path / "prepared"
    args = ["data", "prepare", zoo["corpus"], "--tokenizer", zoo["tok"], "--output-dir", out, "--workers", "1"]
    assert run_aura(*args).returncode == 0
    (out / "meta.json").write_text("{ truncated", encoding="utf-8")
    before = tree(out)
    refused(run_aura_here(*args), "meta.json is not valid", "--overwrite")
    assert tree(out) == before
    r = run_aura(*args, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "meta.json").read_text())["format"] == "aura-tokens-v1"


def test_pretrain_raw_text_never_replaces_a_users_data_folder_in_the_run_dir(zoo, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    ownership.write_marker(run, "run")  # an Aura run dir in which the user keeps a folder of theirs
    user_project(run / "data")
    before = tree(run / "data")
    r = run_aura_here("pretrain", "--data", zoo["corpus"], "--tokenizer", zoo["tok"], "--output-dir", run, *TINY)
    assert r.returncode != 0 and "was not created by Aura" in r.stderr, r.stdout + r.stderr
    assert tree(run / "data") == before


@pytest.mark.parametrize("where", [".", "~", "/"])
def test_prepare_into_cwd_home_or_root_is_a_clear_refusal(zoo, tmp_path, where):
    cwd = user_project(tmp_path / "home")
    before = tree(cwd)
    r = run_aura_here(
        "data",
        "prepare",
        zoo["corpus"],
        "--tokenizer",
        zoo["tok"],
        "--output-dir",
        where,
        "--workers",
        "1",
        "--overwrite",
        cwd=cwd,
        env={"HOME": str(cwd)},
    )
    refused(r, "cannot be an output")
    assert tree(cwd) == before


def test_prepare_cleanup_spares_a_concurrent_siblings_staging_dir(zoo, tmp_path):
    out = tmp_path / "prepared"
    script = textwrap.dedent(f"""
        import time
        from aura.core.staging import staged_dir
        with staged_dir({str(out)!r}, kind="data") as tmp:
            (tmp / "train_00000.bin").write_bytes(b"sibling at work")
            print(tmp, flush=True)
            time.sleep(120)
    """)
    sibling = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        staging = Path(sibling.stdout.readline().strip())
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        stale = tmp_path / f".tmp-prepared-zzzz9999~{dead.pid}@{fsutil.host_name()}"
        stale.mkdir()
        r = run_aura("data", "prepare", zoo["corpus"], "--tokenizer", zoo["tok"], "--output-dir", out, "--workers", "1")
        assert r.returncode == 0, r.stderr
        assert (staging / "train_00000.bin").read_bytes() == b"sibling at work"
        assert not stale.exists()  # a writer that is gone: its leftover goes
    finally:
        sibling.kill()
        sibling.wait()


def test_prepared_outputs_get_the_users_permissions(zoo, tmp_path):
    out = tmp_path / "prepared"
    r = aura_with_umask(
        "data", "prepare", zoo["corpus"], "--tokenizer", zoo["tok"], "--output-dir", out, "--workers", "1", umask=0o002
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & 0o777 == 0o775
    for name in ("meta.json", ownership.MARKER, "train_00000.bin"):
        assert (out / name).stat().st_mode & 0o777 == 0o664, name


def test_blank_lines_between_paragraphs_are_not_documents(zoo, tmp_path):
    files = sorted(CORPUS_DIR.glob("*.txt"))
    lines = [ln for p in files for ln in p.read_text(encoding="utf-8").splitlines()]
    assert any(not ln.strip() for ln in lines)  # the embedded corpus separates paragraphs with them
    out = tmp_path / "prepared"
    r = run_aura("data", "prepare", *files, "--tokenizer", zoo["tok"], "--output-dir", out, "--workers", "1")
    assert r.returncode == 0, r.stderr
    cleaning = json.loads((out / "meta.json").read_text())["cleaning"]
    assert cleaning["documents_read"] == sum(1 for ln in lines if ln.strip())
    assert cleaning["too_short"] == 0


def test_yaml_config_that_forces_is_announced(zoo, tmp_path):
    cfg = tmp_path / "shared.yaml"
    cfg.write_text("force: true\ntrust_remote_code: false\nworkers: 1\n", encoding="utf-8")
    r = run_aura(
        "data", "prepare", zoo["corpus"], "--tokenizer", zoo["tok"], "--output-dir", tmp_path / "o", "--config", cfg
    )
    assert r.returncode == 0, r.stderr
    assert f"{cfg} sets 'force: true'" in r.stderr and "replaces results" in r.stderr
    assert "trust_remote_code" not in r.stderr  # false: nothing to announce
    cfg.write_text("trust_remote_code: true\n", encoding="utf-8")
    r = run_aura(
        "data",
        "prepare",
        zoo["corpus"],
        "--tokenizer",
        zoo["tok"],
        "--output-dir",
        tmp_path / "o",
        "--config",
        cfg,
        "--overwrite",
        env={"AURA_LANG": "es"},
    )
    assert f"{cfg} activa 'trust_remote_code: true'" in r.stderr, r.stderr


# ---- aura tokenizer train --------------------------------------------------------------------------


def test_tokenizer_force_never_replaces_a_model_or_user_dir(zoo, tmp_path):
    model = build_llama(tmp_path / "final", zoo["tok"], hidden=32, layers=1)  # holds a tokenizer.json
    proj = user_project(tmp_path / "proj")
    for target in (model, proj):
        before = tree(target)
        r = run_aura_here(
            "tokenizer", "train", zoo["corpus"], "--vocab-size", "300", "--output-dir", target, "--overwrite"
        )
        refused(r, "was not created by Aura")
        assert tree(target) == before
    ours = tmp_path / "tok"
    assert run_aura("tokenizer", "train", zoo["corpus"], "--vocab-size", "300", "--output-dir", ours).returncode == 0
    refused(
        run_aura_here("tokenizer", "train", zoo["corpus"], "--vocab-size", "300", "--output-dir", ours), "--overwrite"
    )
    r = run_aura("tokenizer", "train", zoo["corpus"], "--vocab-size", "320", "--output-dir", ours, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert ownership.read_marker(ours)["kind"] == "tokenizer"


# ---- aura merge ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_merge_force_never_writes_over_its_inputs_or_a_users_dir(zoo, tmp_path):
    proj = user_project(tmp_path / "proj")
    for target, why in (
        (zoo["base"], "is the input"),
        (zoo["adapter"], "is the input"),
        (zoo["run"], "contains the input"),
        (proj, "was not created by Aura"),
    ):
        before = tree(target)
        r = run_aura_here(
            "merge", "--base-model", zoo["base"], "--adapter", zoo["adapter"], "--output-dir", target, "--overwrite"
        )
        refused(r, why)
        assert tree(target) == before, target
    out = tmp_path / "merged"
    r = run_aura_here("merge", "--base-model", zoo["base"], "--adapter", zoo["adapter"], "--output-dir", out)
    assert r.returncode == 0, r.stderr
    assert ownership.read_marker(out)["kind"] == "model"
    refused(
        run_aura_here("merge", "--base-model", zoo["base"], "--adapter", zoo["adapter"], "--output-dir", out),
        "--overwrite",
    )
    r = run_aura_here(
        "merge", "--base-model", zoo["base"], "--adapter", zoo["adapter"], "--output-dir", out, "--overwrite"
    )
    assert r.returncode == 0, r.stderr


# ---- aura export gguf ------------------------------------------------------------------------------


def test_gguf_export_keeps_a_users_modelfile_and_its_input(zoo, tmp_path):
    pytest.importorskip("gguf")
    out_dir = tmp_path / "gguf"
    out_dir.mkdir()
    (out_dir / "model-f32.Modelfile").write_text("FROM ./mine.gguf\nPARAMETER temperature 0.2\n", encoding="utf-8")
    (out_dir / "mine.gguf").write_bytes(os.urandom(512))
    before = tree(out_dir)
    export = ["export", "gguf", "--model", zoo["base"], "--output-dir", out_dir, "--quant", "f32", "--no-verify"]
    refused(run_aura_here(*export), "model-f32.Modelfile", "not a Modelfile written by Aura")
    refused(run_aura_here(*export, "--outfile", "mine.gguf"), "already exists")
    assert tree(out_dir) == before
    refused(
        run_aura_here("export", "gguf", "--model", zoo["base"], "--outfile", zoo["base"] / "m.gguf", "--no-verify"),
        "lies inside the input",
    )
    # Aura's own, unedited Modelfile is regenerated; one per GGUF; the files get the user's permissions
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "Modelfile").write_text("FROM ./otro.gguf\n", encoding="utf-8")  # a user's, of the old shared name
    for quant in ("f32", "f16", "f32"):
        r = here_with_umask(
            "export",
            "gguf",
            "--model",
            zoo["base"],
            "--output-dir",
            ours,
            "--quant",
            quant,
            "--no-verify",
            "--overwrite",
            umask=0o002,
        )
        assert r.returncode == 0, r.stderr
        assert f"FROM ./model-{quant}.gguf" in (ours / f"model-{quant}.Modelfile").read_text()
    assert (ours / "Modelfile").read_text() == "FROM ./otro.gguf\n"
    for name in ("model-f32.gguf", "model-f32.Modelfile", "model-f16.Modelfile"):
        assert (ours / name).stat().st_mode & 0o777 == 0o664, name
    edited = ours / "model-bf16.Modelfile"
    r = here_with_umask(
        "export", "gguf", "--model", zoo["base"], "--output-dir", ours, "--quant", "bf16", "--no-verify", umask=0o002
    )
    assert r.returncode == 0, r.stderr
    edited.write_text(edited.read_text() + "PARAMETER num_ctx 4096\n")
    (ours / "model-bf16.gguf").unlink()
    refused(
        run_aura_here("export", "gguf", "--model", zoo["base"], "--output-dir", ours, "--quant", "bf16", "--no-verify"),
        "model-bf16.Modelfile",
        "not a Modelfile written by Aura",
    )


# ---- aura check-dist -------------------------------------------------------------------------------


def test_single_process_check_dist_listens_on_no_public_interface():
    psutil = pytest.importorskip("psutil")
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = psutil.Popen(
        [sys.executable, "-m", "aura", "check-dist", "--size-mb", "1", "--iters", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    listening = set()
    while proc.poll() is None:
        try:
            listening |= {c.laddr.ip for c in proc.net_connections(kind="all") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            pass
        time.sleep(0.01)
    out, err = proc.communicate()
    assert proc.returncode == 0 and "Sync=OK" in out, out + err
    assert listening <= {"127.0.0.1", "::1"}, listening  # torch's TCP store would listen on every interface


def test_trained_weights_follow_the_umask(zoo, tmp_path):
    """Issue 25.16: model.safetensors (checkpoints and final/) came out 0600 under umask 022 (safetensors
    writes through a private temp file) while every other output followed the umask."""
    run = tmp_path / "run"
    r = aura_with_umask(
        "pretrain",
        "--data",
        zoo["corpus"],
        "--tokenizer",
        zoo["tok"],
        "--output-dir",
        run,
        *TINY,
        "--save-steps",
        "1",
        umask=0o022,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    weights = [run / "checkpoint-step-1" / "model.safetensors", run / "final" / "model.safetensors"]
    for path in [*weights, *(p for p in run.rglob("*") if p.is_file() and p.relative_to(run).parts[0] != "data")]:
        assert path.stat().st_mode & 0o777 == 0o644, (path, oct(path.stat().st_mode))
    for path in [run, *(p for p in run.rglob("*") if p.is_dir())]:
        assert path.stat().st_mode & 0o777 == 0o755, (path, oct(path.stat().st_mode))

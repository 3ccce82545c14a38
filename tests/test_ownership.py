"""Ownership markers and staging names: what Aura may replace or clean up, tried on real directories.

``aura.core.ownership`` decides whether an output may be written or replaced; ``aura.core.atomic``
names its staging entries after their writer (``~PID@HOST``) so that cleanup removes only leftovers of
writers that are gone, and gives outputs the user's usual permissions (umask), not mkdtemp's 0700.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aura.core import atomic as fsutil, ownership, staging
from aura.core.errors import AuraError
from tests.conftest import run_aura
from tests.tiny_models import CORPUS_DIR


@pytest.fixture
def umask_002():
    old = os.umask(0o002)
    yield
    os.umask(old)


def _user_dir(path: Path) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "notes.txt").write_text("mine", encoding="utf-8")
    (path / "src" / "main.py").write_text("print('hola')\n", encoding="utf-8")
    return path


# ---- check_replaceable / check_location ----------------------------------------------------------


def test_check_replaceable_states_and_refusals(tmp_path):
    assert ownership.check_replaceable(tmp_path / "new", kind="data") == "absent"
    (tmp_path / "empty").mkdir()
    assert ownership.check_replaceable(tmp_path / "empty", kind="data") == "empty"
    with staging.staged_dir(tmp_path / "ours", kind="data") as tmp:
        (tmp / "x.bin").write_bytes(b"\0")
    assert ownership.read_marker(tmp_path / "ours")["kind"] == "data"
    assert ownership.check_replaceable(tmp_path / "ours", kind="data") == "owned"
    with pytest.raises(AuraError, match="of kind 'tokenizer'; it is of kind 'data'"):
        ownership.check_replaceable(tmp_path / "ours", kind="tokenizer")
    _user_dir(tmp_path / "theirs")
    with pytest.raises(AuraError, match="was not created by Aura.*not even with --overwrite"):
        ownership.check_replaceable(tmp_path / "theirs", kind="run", flag="--overwrite")
    (tmp_path / "file").write_text("x")
    with pytest.raises(AuraError, match="was not created by Aura"):
        ownership.check_replaceable(tmp_path / "file", kind="data")
    (tmp_path / "link").symlink_to(tmp_path / "ours")  # a link to an Aura dir is not that dir
    with pytest.raises(AuraError, match="was not created by Aura"):
        ownership.check_replaceable(tmp_path / "link", kind="data")
    # a marker someone wrote by hand with garbage is no marker
    (tmp_path / "theirs" / ownership.MARKER).write_text("{not json")
    with pytest.raises(AuraError):
        ownership.check_replaceable(tmp_path / "theirs", kind="data")


def test_check_location_refuses_root_home_cwd_and_overlaps(tmp_path, monkeypatch):
    home = tmp_path / "home"
    work = home / "proj" / "work"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for target, what in [
        ("/", "filesystem root"),
        ("~", "home directory"),
        (".", "current directory"),
        ("..", "current directory"),
        (str(home / "proj"), "current directory"),
    ]:
        with pytest.raises(AuraError, match=what):
            ownership.check_location(target)
    data = home / "corpus"
    (data / "sub").mkdir(parents=True)
    for target, relation in [(data, "is"), (data / "sub" / "out", "lies inside"), (home / "other", None)]:
        if relation:
            with pytest.raises(AuraError, match=f"{relation} the input"):
                ownership.check_location(target, inputs=[data])
        else:
            assert ownership.check_location(target, inputs=[data, "not/there", None]) == (home / "other")
    with pytest.raises(AuraError, match="contains the input"):
        ownership.check_location(data, inputs=[data / "sub"])


def test_staged_replace_never_removes_a_foreign_dir(tmp_path):
    target = _user_dir(tmp_path / "target")
    before = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    with pytest.raises(AuraError, match="was not created by Aura"):
        with staging.staged_dir(target, replace=True, kind="model") as tmp:
            (tmp / "config.json").write_text("{}")
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir()] == ["target"]  # no staging leftover either


# ---- legacy layouts: directories an older Aura wrote, before markers ------------------------------


def test_legacy_layouts_are_recognised_only_when_exact(tmp_path):
    tok = tmp_path / "tok"
    r = run_aura("tokenizer", "train", CORPUS_DIR, "--vocab-size", "300", "--output-dir", tok)
    assert r.returncode == 0, r.stderr
    data = tmp_path / "data"
    r = run_aura("data", "prepare", CORPUS_DIR, "--tokenizer", tok, "--output-dir", data, "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert ownership.read_marker(tok)["kind"] == "tokenizer" and ownership.read_marker(data)["kind"] == "data"
    assert not (data / "tokenizer" / ownership.MARKER).exists()  # the copy inside belongs to the data dir
    for d, kind in ((tok, "tokenizer"), (data, "data")):
        (d / ownership.MARKER).unlink()  # as an Aura before markers wrote it
        assert ownership.owned_kind(d) == kind
        assert ownership.check_replaceable(d, kind=kind) == "owned"
        (d / "notes.md").write_text("mine")  # one foreign name: not Aura's any more
        assert ownership.owned_kind(d) is None
        (d / "notes.md").unlink()
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "format": "something-else"}))
    assert ownership.owned_kind(data) is None


# ---- staging names, stale cleanup ----------------------------------------------------------------


def test_staging_names_carry_the_writer(tmp_path):
    with staging.staged_dir(tmp_path / "out", kind="data") as tmp:
        assert tmp.name.startswith(".tmp-out-")
        assert staging.tmp_owner(tmp.name) == (os.getpid(), fsutil.host_name())
        assert not staging.is_stale_tmp(tmp)  # its writer is alive: this process
        assert staging.remove_stale_tmp(tmp_path) == [] and tmp.is_dir()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_remove_stale_tmp_spares_live_writers_and_recent_unknown_entries(tmp_path):
    host = fsutil.host_name()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        dead = _dead_pid()
        entries = {
            "live": tmp_path / f".tmp-data-abcd1234~{live.pid}@{host}",
            "dead": tmp_path / f".tmp-data-efgh5678~{dead}@{host}",
            "dead_file": tmp_path / f".tmp-meta.json.x1y2z3~{dead}@{host}",
            "other_host": tmp_path / f".tmp-data-ijkl9012~{dead}@some-other-node",
            "unknown_new": tmp_path / ".tmp-data-legacy01",
            "unknown_old": tmp_path / ".tmp-data-legacy02",
            "not_tmp": tmp_path / "data",
        }
        for name, p in entries.items():
            if name == "dead_file":
                p.write_text("x")
            else:
                (p / "sub").mkdir(parents=True)
                (p / "sub" / "f.bin").write_bytes(os.urandom(64))
        old = time.time() - 2 * staging.STALE_UNKNOWN_S
        for p in [entries["unknown_old"], *entries["unknown_old"].rglob("*")]:
            os.utime(p, (old, old))
        # in a user's directory (max_age_s=None) only provably dead writers' entries go
        removed = staging.remove_stale_tmp(tmp_path, prefix=staging.staging_prefixes("data"), max_age_s=None)
        assert sorted(p.name for p in removed) == [entries["dead"].name]
        removed = staging.remove_stale_tmp(tmp_path)
        assert sorted(p.name for p in removed) == sorted([entries["dead_file"].name, entries["unknown_old"].name])
        for name in ("live", "other_host", "unknown_new", "not_tmp"):
            assert (entries[name] / "sub" / "f.bin").is_file(), name
    finally:
        live.kill()
        live.wait()
    assert staging.remove_stale_tmp(tmp_path, prefix="data-abcd") == [entries["live"]]


def test_writer_killed_between_the_two_renames_gets_its_directory_back(tmp_path):
    """``.tmp-old~NAME~PID@HOST`` left by a writer killed mid-swap is the previous complete NAME."""
    dead = _dead_pid()
    moved_aside = tmp_path / f".tmp-old~final~{dead}@{fsutil.host_name()}"
    moved_aside.mkdir()
    (moved_aside / "model.safetensors").write_bytes(b"weights")
    staging.remove_stale_tmp(tmp_path)
    assert (tmp_path / "final" / "model.safetensors").read_bytes() == b"weights"
    assert not moved_aside.exists()


def test_writer_killed_while_deleting_the_replaced_directory_leaves_nothing_to_restore(tmp_path):
    """Killed while removing the directory it replaced: the half-deleted old copy is a leftover to remove,
    never a NAME to rename back, even once NAME has been moved away (``--fork`` moves best/ aside; CI saw
    a marker-less best/ reappear that way)."""
    final = tmp_path / "best"
    with staging.staged_dir(final, kind="model") as tmp:
        (tmp / "model.safetensors").write_bytes(b"old")
    script = textwrap.dedent(f"""
        import os, shutil
        from aura.core import staging
        def die_midway(path, ignore_errors=False):
            os.unlink(os.path.join(path, ".aura-dir.json"))  # the marker is gone, the weights are not yet
            os._exit(9)
        staging.shutil.rmtree = die_midway
        with staging.staged_dir({str(final)!r}, replace=True, kind="model") as tmp:
            (tmp / "model.safetensors").write_bytes(b"new")
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    assert (final / "model.safetensors").read_bytes() == b"new"
    final.rename(tmp_path / "moved-aside")  # what --fork does with the abandoned branch's best/
    removed = staging.remove_stale_tmp(tmp_path)
    assert [p.name.split("~")[0] for p in removed] == [".tmp-best-gone"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moved-aside"]


def test_killed_writer_leftover_is_removed_by_the_next_cleanup(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from aura.core.staging import staged_dir
        with staged_dir({str(tmp_path / "final")!r}, kind="data") as tmp:
            (tmp / 'part').write_text('x')
            print('writing', flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    (leftover,) = list(tmp_path.iterdir())
    assert staging.remove_stale_tmp(tmp_path) == []  # still writing
    proc.kill()
    proc.wait(timeout=30)
    assert staging.remove_stale_tmp(tmp_path) == [leftover] and not any(tmp_path.iterdir())


# ---- permissions -----------------------------------------------------------------------------------


def test_outputs_get_the_users_permissions(tmp_path, umask_002):
    with staging.staged_dir(tmp_path / "out", kind="model") as tmp:
        fsutil.atomic_write_json(tmp / "config.json", {"a": 1})
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o775  # not mkdtemp's 0700
    assert (tmp_path / "out" / "config.json").stat().st_mode & 0o777 == 0o664  # not mkstemp's 0600
    assert (tmp_path / "out" / ownership.MARKER).stat().st_mode & 0o777 == 0o664
    private = tmp_path / "secret.json"
    fsutil.atomic_write_json(private, {"v": 1})
    os.chmod(private, 0o600)
    fsutil.atomic_write_json(private, {"v": 2})  # a replaced file keeps the mode its owner chose
    assert private.stat().st_mode & 0o777 == 0o600 and json.loads(private.read_text()) == {"v": 2}
    assert fsutil.current_umask() == 0o002

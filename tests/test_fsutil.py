"""Atomic writes: a reader sees the old complete object or the new complete one, never half."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from aura.core import atomic as fsutil, staging


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a.json"
    fsutil.atomic_write_json(target, {"x": 1})
    fsutil.atomic_write_json(target, {"x": 2})
    assert fsutil.read_json(target) == {"x": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_staged_dir_success_and_failure(tmp_path):
    final = tmp_path / "out"
    with staging.staged_dir(final) as tmp:
        (tmp / "f.txt").write_text("hola")
        assert not final.exists()
    assert (final / "f.txt").read_text() == "hola"

    with pytest.raises(RuntimeError):
        with staging.staged_dir(tmp_path / "broken") as tmp:
            (tmp / "f.txt").write_text("medio")
            raise RuntimeError("boom")
    assert not (tmp_path / "broken").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(fsutil.TMP_PREFIX)]

    with pytest.raises(FileExistsError):
        with staging.staged_dir(final) as tmp:
            (tmp / "g.txt").write_text("x")
    with staging.staged_dir(final, replace=True) as tmp:
        (tmp / "g.txt").write_text("nuevo")
    assert sorted(p.name for p in final.iterdir()) == ["g.txt"]


def test_kill_during_staged_write_leaves_only_tmp(tmp_path):
    """SIGKILL mid-write: the final name never appears; remove_stale_tmp cleans the leftovers."""
    script = textwrap.dedent(f"""
        import time
        from aura.core.staging import staged_dir
        with staged_dir({str(tmp_path / "final")!r}) as tmp:
            (tmp / 'part').write_text('x')
            print('writing', flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (tmp_path / "final").exists()
    leftovers = staging.remove_stale_tmp(tmp_path)
    assert len(leftovers) == 1 and not any(tmp_path.iterdir())


def test_sha256_and_sizes(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"abc")
    assert fsutil.sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert fsutil.dir_size(tmp_path) == 3
    assert fsutil.human_bytes(2048) == "2.0 KB"

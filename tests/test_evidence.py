"""tests/evidence.py itself: a catalogue check names every broken entry, and a skip of a capability that
AURA_REQUIRE names fails the run (pytest run for real on a tiny test file, with AURA_REQUIRE set and unset)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.evidence import CAPABILITIES, check_every

# The test harness, not Aura: not counted as behavioural tests.
pytestmark = pytest.mark.catalogue

TINY = """
from tests.evidence import importorskip, require_or_skip


def test_plain():
    pass


def test_needs_netns():
    require_or_skip("netns", "no network namespaces here")


def test_needs_a_missing_extra():
    importorskip("aura_no_such_module_xyz", "ray")


def test_has_its_extra():
    assert importorskip("json", "ray").dumps(1) == "1"
"""


def _pytest(tmp_path, require: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_tiny.py").write_text(TINY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AURA_REQUIRE", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    if require is not None:
        env["AURA_REQUIRE"] = require
    # -p tests.conftest: the suite's own hooks (AURA_REQUIRE checked at start-up, named in the header).
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-rs",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_tiny.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )


def test_without_aura_require_a_missing_capability_skips_and_is_listed(tmp_path):
    r = _pytest(tmp_path, None)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 2 skipped" in r.stdout, r.stdout
    # -rs lists every skip with its capability and reason
    assert "[netns] no network namespaces here" in r.stdout and "[ray] " in r.stdout, r.stdout


def test_a_required_capability_that_is_missing_fails_the_run(tmp_path):
    r = _pytest(tmp_path, "netns")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "AURA_REQUIRE: netns" in r.stdout
    assert "1 failed, 2 passed, 1 skipped" in r.stdout, r.stdout
    assert "required capability 'netns' (AURA_REQUIRE) is missing: no network namespaces here" in r.stdout

    r = _pytest(tmp_path, "netns, ray")
    assert r.returncode == 1 and "2 failed, 2 passed" in r.stdout, r.stdout
    assert "required capability 'ray' (AURA_REQUIRE) is missing" in r.stdout


def test_an_unknown_capability_stops_the_run_before_any_test(tmp_path):
    r = _pytest(tmp_path, "netns,brwoser")
    assert r.returncode == 4, r.stdout + r.stderr  # pytest's usage error
    assert "unknown capabilities ['brwoser']" in r.stderr
    assert "passed" not in r.stdout


PLAIN = """
import pytest

pytest.importorskip("trl.aura_no_such_module_xyz")


def test_never_runs():
    pass
"""

PLAIN_IN_A_TEST = """
import pytest


def test_plain_importorskip():
    pytest.importorskip("ray.aura_no_such_module_xyz")
"""


def test_a_plain_importorskip_of_a_required_module_fails_too(tmp_path):
    """Files not yet using tests/evidence.py's helpers: pytest.importorskip of a module whose capability
    AURA_REQUIRE names (trl, ray...) fails, at collection or in the test, instead of skipping."""
    (tmp_path / "test_plain_module.py").write_text(PLAIN)
    (tmp_path / "test_plain_call.py").write_text(PLAIN_IN_A_TEST)

    def run(require):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AURA_REQUIRE", "PYTEST_"))}
        env.update(PYTHONPATH=str(ROOT), **({"AURA_REQUIRE": require} if require else {}))
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "tests.conftest",
                "-p",
                "no:cacheprovider",
                "-rs",
                "--continue-on-collection-errors",  # (without it, the error stops the run)
                "--rootdir",
                str(tmp_path),
                "-c",
                os.devnull,
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )

    r = run(None)
    assert r.returncode == 0 and "2 skipped" in r.stdout, r.stdout + r.stderr
    r = run("trl,ray")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "required capability 'trl' (AURA_REQUIRE) is missing" in r.stdout, r.stdout
    assert "required capability 'ray' (AURA_REQUIRE) is missing" in r.stdout, r.stdout
    assert "1 failed" in r.stdout and "1 error" in r.stdout, r.stdout
    r = run("ray")  # only what is required fails
    assert "1 failed" in r.stdout and "1 skipped" in r.stdout and "error" not in r.stdout.lower(), r.stdout


def test_ci_requires_only_known_capabilities():
    """.ci/run's AURA_REQUIRE names capabilities this file knows (else every CI run would stop)."""
    text = (ROOT / ".ci" / "run").read_text()
    declared = [line for line in text.splitlines() if line.lstrip().startswith("AURA_REQUIRE=")]
    assert declared, "CI declares nothing it provides"
    for line in declared:
        value = line.split("AURA_REQUIRE=", 1)[1].split()[0].strip("\"'")
        names = {n for n in value.replace("$AURA_REQUIRE", "").replace("${AURA_REQUIRE}", "").split(",") if n}
        assert names and names <= set(CAPABILITIES), (line, names - set(CAPABILITIES))


def test_check_every_names_every_failing_entry():
    def check(name, value):
        assert value > 0, f"{name} is {value}"

    assert check_every([("a", 1), ("b", 2)], check) == 2
    with pytest.raises(AssertionError) as e:
        check_every([("a", 1), ("b", -1), ("c", 3), ("d", 0)], check, name=lambda n, v: n)
    msg = str(e.value)
    assert msg.startswith("2 of 4 entries fail:")
    assert "b: b is -1" in msg and "d: d is 0" in msg and "a:" not in msg and "c:" not in msg

    # a message that already names its entry is not prefixed twice
    def named(name, value):
        assert value > 0, f"{name}: {value} is not positive"

    with pytest.raises(AssertionError) as e:
        check_every([("x", 0)], named, name=lambda n, v: n)
    assert str(e.value).splitlines()[1] == "x: 0 is not positive"


def test_check_every_collects_pytest_fail_too():
    def check(x):
        if x % 2:
            pytest.fail(f"{x} is odd")

    with pytest.raises(AssertionError, match=r"(?s)2 of 4 entries fail:.*1: 1 is odd.*3: 3 is odd"):
        check_every([0, 1, 2, 3], check)

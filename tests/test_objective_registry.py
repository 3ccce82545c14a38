"""The objective registry (``aura.train.objectives.registry``) is the one list of ``aura finetune --objective``:
the CLI's choices, the Studio's and the checks all come from it, an unknown name is refused clearly, and
choosing one imports no other's modules."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_aura_here

ROOT = Path(__file__).resolve().parents[1]


def test_every_objective_choice_is_a_registry_entry():
    from aura.core.config import build_parser
    from aura.studio.actions import form
    from aura.train.finetune_config import FinetuneConfig
    from aura.train.objectives.registry import OBJECTIVES, ObjectiveSetup, setup_class

    parser = build_parser(FinetuneConfig, prog="aura finetune", description="")
    (action,) = [a for a in parser._actions if "--objective" in a.option_strings]
    names = ("sft", "dpo", "orpo", "grpo", "simpo", "cpo", "kto", "reward", "distill")
    assert tuple(action.choices) == tuple(OBJECTIVES) == names
    assert {f["name"]: f for f in form("finetune")}["objective"]["choices"] == list(OBJECTIVES)
    for name in OBJECTIVES:
        setup = setup_class(name)
        assert issubclass(setup, ObjectiveSetup) and setup.name == name
        needs = {"teacher": "t"} if name == "distill" else {}  # distill's one required flag
        assert FinetuneConfig(base_model="b", objective=name, **needs).objective == name  # its checks pass


def test_an_unknown_objective_is_refused_clearly(tmp_path):
    from aura.core.errors import AuraError
    from aura.train.finetune_config import FinetuneConfig

    r = run_aura_here("finetune", "--objective", "ppo")
    assert r.returncode == 2
    assert (
        "argument --objective: invalid choice: 'ppo' (choose from 'sft', 'dpo', 'orpo', 'grpo', 'simpo', "
        "'cpo', 'kto', 'reward', 'distill')"
    ) in r.stderr, r.stderr
    config = tmp_path / "ft.yaml"
    config.write_text("objective: ppo\n", encoding="utf-8")
    r = run_aura_here("finetune", "--config", config)
    assert r.returncode == 2
    assert (
        "Invalid value for 'objective': 'ppo' (expected sft | dpo | orpo | grpo | simpo | cpo | kto | reward | distill)"
        in r.stderr
    )
    # a config built in Python gets the same refusal (it used to train as if the objective were a preference one)
    with pytest.raises(AuraError, match=r"--objective: 'ppo' \(expected sft \| dpo \| orpo \| grpo"):
        FinetuneConfig(base_model="b", objective="ppo")


def test_choosing_sft_imports_no_other_objective():
    code = textwrap.dedent("""
        import sys
        import aura.train.finetune
        from aura.train.finetune_config import FinetuneConfig
        from aura.train.objectives.registry import setup_class

        cfg = FinetuneConfig(base_model="b")
        setup_class(cfg.objective)().conversations([])
        print(" ".join(sorted(m for m in sys.modules if m.startswith("aura.train.objectives."))))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    loaded = set(out.stdout.split())
    assert "aura.train.objectives.sft_setup" in loaded, out.stdout
    others = {
        "grpo",
        "grpo_setup",
        "rollout",
        "vllm_rollout",
        "preference",
        "preference_setup",
        "kto",
        "kto_setup",
        "simpo",
        "simpo_setup",
        "reward",
        "reward_setup",
        "distill",
        "distill_setup",
    }
    assert not loaded & {f"aura.train.objectives.{m}" for m in others}, loaded


@pytest.mark.catalogue
def test_prepare_names_no_objective():
    """FinetuneCommand.prepare asks the registry: no objective's name appears in it."""
    from aura.train.finetune import FinetuneCommand
    from aura.train.objectives.registry import OBJECTIVES

    tree = ast.parse(textwrap.dedent(inspect.getsource(FinetuneCommand.prepare)))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & set(OBJECTIVES), strings & set(OBJECTIVES)

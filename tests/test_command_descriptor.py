"""``aura.core.commands.Command`` is the one descriptor of a command: the pipeline's stages, the Studio's launch
menu and forms read it, and no other table repeats a list of command names."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from aura.core import i18n
from aura.core.commands import COMMANDS, StudioForm
from aura.core.config import fields_of
from aura.core.errors import AuraError
from tests.evidence import importorskip

ROOT = Path(__file__).resolve().parent.parent
# the stages a pipeline may run, as the refusal has listed them since the pipeline existed
STAGES_TODAY = (
    "data prepare, data curate, tokenizer train, tokenizer extend, pretrain, finetune, generate, eval, "
    "merge, export gguf, push, check-dist, doctor, plot"
)


@pytest.fixture
def english():
    i18n.set_lang("en")
    yield
    i18n.set_lang(None)


def _pipeline(tmp_path: Path, command: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"stages:\n  - name: one\n    command: {command}\n", encoding="utf-8")
    return str(path)


def test_a_non_stage_command_is_refused_with_the_same_message_and_the_descriptor_decides(
    tmp_path, monkeypatch, english
):
    from aura.pipeline import spec

    file = _pipeline(tmp_path, "serve")
    with pytest.raises(AuraError) as e:
        spec.load(file)
    assert str(e.value) == (
        f"{file}, line 2, stage 'one' (aura serve): 'aura serve' is not a command that can be a "
        f"stage. Possible commands: {STAGES_TODAY}."
    )
    # the fact lives in the descriptor: a command marked as no stage is refused and leaves the list
    file = _pipeline(tmp_path, "merge")
    assert [s.key for s in spec.load(file).stages] == [("merge",)]
    monkeypatch.setitem(COMMANDS, ("merge",), dataclasses.replace(COMMANDS[("merge",)], stage=False))
    with pytest.raises(AuraError) as e:
        spec.load(file)
    assert "'aura merge' is not a command that can be a stage" in str(e.value)
    assert e.value.args[0].endswith(f"Possible commands: {STAGES_TODAY.replace(' merge,', '')}.")


def test_the_studio_s_launch_menu_is_the_commands_marked_launchable(tmp_path, monkeypatch):
    importorskip("starlette", "studio")
    from starlette.testclient import TestClient

    from aura.studio.app import create_app

    def menu() -> tuple[TestClient, list[str]]:
        c = TestClient(create_app(tmp_path), base_url="http://127.0.0.1:7860")
        return c, c.get("/api/session").json()["commands"]

    c, commands = menu()
    assert commands == ["pretrain", "finetune", "data prepare", "eval", "export gguf"]  # the page's menu, as before
    # one more command marked launchable in aura.core.commands: the page offers it, with its form and folder name
    merge = dataclasses.replace(
        COMMANDS[("merge",)],
        studio=StudioForm(
            position=5, default_name="fusion", essential=("base_model", "adapter"), inside=("base_model", "adapter")
        ),
    )
    monkeypatch.setitem(COMMANDS, ("merge",), merge)
    monkeypatch.setitem(COMMANDS, ("pretrain",), dataclasses.replace(COMMANDS[("pretrain",)], studio=None))
    c, commands = menu()
    assert commands == ["finetune", "data prepare", "eval", "export gguf", "merge"]
    form = c.get("/api/forms/merge").json()
    assert form["name"] == "fusion" and [f["name"] for f in form["fields"][:2]] == ["base_model", "adapter"]
    assert "output_dir" not in {f["name"] for f in form["fields"]}  # the folder is the run's name
    refused = c.get("/api/forms/pretrain")
    assert refused.status_code == 404 and "finetune, data prepare, eval, export gguf, merge" in refused.json()["error"]
    # and the page keeps no copy of the list
    js = (ROOT / "aura" / "studio" / "static" / "app.js").read_text(encoding="utf-8")
    assert "const COMMANDS" not in js and '"data prepare"' not in js and '"finetune"' not in js and "S.commands" in js


def test_each_command_s_output_field_is_one_its_config_has():
    """The pipeline sets a stage's ``output`` field to DIR/STAGE and the Studio a launch's to its folder: each
    descriptor names a field its config has, and a stage without one is a command that writes no folder."""
    for key, cmd in COMMANDS.items():
        names = {f.name for f, _ in fields_of(getattr(importlib.import_module(cmd.module), cmd.config))}
        assert cmd.output is None or cmd.output in names, key
        if cmd.stage:
            assert cmd.output == ("output_dir" if "output_dir" in names else None), key
        if cmd.studio is not None:
            assert cmd.output is not None and set(cmd.studio.essential + cmd.studio.inside) <= names, key
            assert set(cmd.studio.hidden) <= names, key

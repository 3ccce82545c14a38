"""Pipelines: a linear chain of Aura commands in one YAML file (``aura pipeline run|list|show|plan``).

``spec.py`` reads a pipeline and turns every stage into its command's typed config before anything runs
(references to earlier stages resolved to their folders); ``pipeline_state.py`` owns ``DIR/pipeline.json`` and the
fingerprints; ``runner.py`` runs the stages (skip, resume, redo); ``report_card.py`` writes the report card
from what the stages wrote; ``pipeline_commands.py`` holds the four commands. Each stage runs the real command's
function with its config, resolved through ``aura.core.commands``: the runner knows nothing of any
command's internals. Shipped pipelines live in ``pipelines/*.yaml``.
"""

"""A trained reward model as a GRPO reward (``--reward model:PATH[:WEIGHT]``; ``aura.data.rewards``).

``PATH`` is what ``aura finetune --objective reward`` wrote (its ``final/`` or ``best/``: a full
``...ForSequenceClassification`` model, or a LoRA adapter whose base is named in its ``adapter_config.json``),
or any Hugging Face sequence-classification model with one output. It is loaded once (in eval mode, without
gradients; an adapter merged into its base) and moved to the training device (``to``). It has its own tokenizer:
each completion is re-tokenised, so the policy's tokenizer may differ. The text it scores is the one it was
trained on: the prompt's messages and the completion as an assistant turn through the reward model's chat
template, up to the end-of-turn token (``aura.data.preference.encode_side``), or, without a template, the
prompt's text followed by the completion (TRL's plain concatenation). The completions of one prompt are scored
in one batch; the score is the head's value at each row's last token (fp32).
"""

from __future__ import annotations

from pathlib import Path

from aura.core.atomic import read_json
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "reward_model",
    {
        "missing": (
            "--reward {spec}: no existe la carpeta del modelo de recompensa {path}. Indica la carpeta final/ "
            "de un 'aura finetune --objective reward' (o un modelo de clasificación de secuencias de Hugging "
            "Face con una salida).",
            "--reward {spec}: the reward model's folder {path} does not exist. Give the final/ folder of an "
            "'aura finetune --objective reward' (or a Hugging Face sequence-classification model with one output).",
        ),
        "not_model": (
            "--reward {spec}: {path} no tiene ni config.json ni adapter_config.json: no es un modelo. Indica la "
            "carpeta final/ de un 'aura finetune --objective reward'.",
            "--reward {spec}: {path} has neither config.json nor adapter_config.json: it is not a model. Give the "
            "final/ folder of an 'aura finetune --objective reward'.",
        ),
        "not_reward": (
            "--reward {spec}: {path} no es un modelo de recompensa ({why}). Entrena uno con 'aura finetune "
            "--objective reward'.",
            "--reward {spec}: {path} is not a reward model ({why}). Train one with 'aura finetune --objective reward'.",
        ),
        "why_arch": (
            "su arquitectura es {arch}, no ...ForSequenceClassification",
            "its architecture is {arch}, not ...ForSequenceClassification",
        ),
        "why_labels": ("tiene {n:salida|salidas}, no 1", "it has {n:output|outputs}, not 1"),
        "why_task": ("su adaptador es de tipo {task}, no SEQ_CLS", "its adapter's task is {task}, not SEQ_CLS"),
        "failed": (
            "--reward {spec}: no se pudo cargar el modelo de recompensa {path} ({error}).",
            "--reward {spec}: could not load the reward model {path} ({error}).",
        ),
    },
)


def check_reward_model(spec: str, path: Path) -> None:
    """The folder exists and holds a model or an adapter (nothing is loaded)."""
    if not path.is_dir():
        raise AuraError(M("missing", spec=spec, path=path))
    if not ((path / "config.json").is_file() or (path / "adapter_config.json").is_file()):
        raise AuraError(M("not_model", spec=spec, path=path))


class RewardModel:
    """The reward function of ``--reward model:PATH``: the model's score of each completion."""

    def __init__(self, path: Path, *, spec: str):
        from transformers import AutoTokenizer

        check_reward_model(spec, path)
        self.path, self.spec = path, spec
        try:
            self.tok = AutoTokenizer.from_pretrained(str(path))
            self.model = self._load()
        except (OSError, ValueError) as e:
            raise AuraError(M("failed", spec=spec, path=path, error=str(e).splitlines()[0] or type(e).__name__)) from e
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        if self.model.config.pad_token_id is None:  # the score is read at the last token that is not padding
            self.model.config.pad_token_id = self.tok.pad_token_id
        self.model.eval().requires_grad_(False)
        self.device = next(self.model.parameters()).device

    def _load(self):
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification

        adapter = (self.path / "adapter_config.json").is_file()
        if adapter:
            meta = read_json(self.path / "adapter_config.json")
            if meta.get("task_type") != "SEQ_CLS":
                self._refuse(M("why_task", task=meta.get("task_type")))
            base = meta.get("base_model_name_or_path") or ""
            model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, dtype=torch.float32)
            from peft import PeftModel

            from aura.models.peft_import import peft_quiet

            with peft_quiet():
                return PeftModel.from_pretrained(model, str(self.path)).merge_and_unload()
        config = AutoConfig.from_pretrained(str(self.path))
        arch = (config.architectures or ["?"])[0]
        if not arch.endswith("ForSequenceClassification"):
            self._refuse(M("why_arch", arch=arch))
        if config.num_labels != 1:
            self._refuse(M("why_labels", n=config.num_labels))
        return AutoModelForSequenceClassification.from_pretrained(str(self.path), dtype=torch.float32)

    def _refuse(self, why: str):
        raise AuraError(M("not_reward", spec=self.spec, path=self.path, why=why))

    def to(self, device) -> RewardModel:
        self.model.to(device)
        self.device = device
        return self

    def texts(self, prompt_messages: list[dict], prompt_text: str, completions: list[str]) -> list[list[int]]:
        """Each completion's token ids as the reward model reads them (the module docstring)."""
        if getattr(self.tok, "chat_template", None):
            from aura.data.preference import encode_side

            return [
                encode_side(self.tok, prompt_messages, {"role": "assistant", "content": c}, "")[0] for c in completions
            ]
        return [self.tok(prompt_text + c, add_special_tokens=False)["input_ids"] for c in completions]

    def __call__(self, *, prompts: list[str], completions: list[str], prompt_messages: list, **_) -> list[float]:
        import torch

        messages = prompt_messages[0] or [{"role": "user", "content": prompts[0]}]
        rows = self.texts(messages, prompts[0], completions)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit:
            rows = [ids[-limit:] for ids in rows]  # the end of a long text: where the score is read
        width = max(len(ids) for ids in rows)
        pad = self.tok.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in rows])  # (G, T), right padding
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in rows])  # (G, T)
        with torch.no_grad():
            logits = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)).logits
        return logits[:, 0].float().cpu().tolist()  # (G,)

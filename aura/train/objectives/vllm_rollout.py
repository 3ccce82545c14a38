"""GRPO rollouts with vLLM in colocate mode (``--rollout-engine vllm``, or ``auto`` on CUDA with vLLM installed).

One vLLM engine per rank shares the GPU with training (``--vllm-gpu-memory`` of its memory). Before each
window's sampling the policy's current weights are pushed into it when an optimizer step changed them:
for LoRA each adapted weight is merged into a new tensor, one layer at a time
(``aura.train.lora_views.merged_weights``: the policy's own weights are never written, so its base, which is
also the reference, does not drift by the rounding of an in-place merge and unmerge), names cleaned of
peft's prefixes, as TRL's colocate mode does; other peft models (QLoRA's 4-bit layers) are merged into
their base and unmerged again by peft. Sampling uses the run's
temperature, top-p, top-k, stop ids and strings, and each row's sampling key as its seed, so a resumed run
asks vLLM for the same samples (vLLM's kernels may still differ from run to run in the last bits).

Not tested in Aura's CI (vLLM needs CUDA); the PyTorch engine is the reference path.
"""

from __future__ import annotations

import torch

from aura.train.lora_views import merged_weights


class VLLMGenerator:
    def __init__(self, model, *, base_name: str, sampling, cfg, dist):
        from vllm import LLM

        self.model, self.sampling, self.dist = model, sampling, dist
        self.llm = LLM(model=base_name, gpu_memory_utilization=cfg.vllm_gpu_memory,
                       max_model_len=None, seed=dist.rank, distributed_executor_backend="external_launcher",
                       enable_prefix_caching=True, trust_remote_code=cfg.trust_remote_code,
                       max_num_batched_tokens=4096)
        self._synced_version = None

    def _weights_version(self) -> int:
        """Changes whenever an optimizer step updated a trainable parameter (their ``_version`` counters)."""
        return sum(p._version for p in self.model.parameters() if p.requires_grad)

    @torch.no_grad()
    def sync(self) -> None:
        version = self._weights_version()
        if version == self._synced_version:
            return
        worker_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        merged = merged_weights(self.model)
        if merged is not None:
            for name, tensor in merged:
                worker_model.load_weights([(name, tensor)])
            self.llm.reset_prefix_cache()
            self._synced_version = version
            return
        peft = hasattr(self.model, "merge_adapter")
        if peft:
            self.model.merge_adapter()
        try:
            for name, param in self.model.named_parameters():
                if peft:
                    if "lora_" in name or "modules_to_save" in name:
                        continue
                    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                worker_model.load_weights([(name, param.data)])
        finally:
            if peft:
                self.model.unmerge_adapter()
        self.llm.reset_prefix_cache()
        self._synced_version = version

    def __call__(self, prompt_ids: list[list[int]], keys: list[int]) -> list[list[int]]:
        from vllm import SamplingParams

        self.sync()
        s = self.sampling
        # one seed per row (its key): the G rows of a prompt must not draw the same completion
        params = [SamplingParams(n=1, max_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                 top_k=s.top_k if s.top_k else -1, stop_token_ids=list(s.stop_ids),
                                 stop=list(s.stop_strings) or None, include_stop_str_in_output=True, seed=key % (2**31 - 1))
                  for key in keys]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]

"""GRPO rollouts with vLLM in colocate mode (``--rollout-engine vllm``; ``auto`` keeps Aura's PyTorch engine).

One vLLM engine per rank shares the GPU with training (``--vllm-gpu-memory`` of its memory). Before each
window's sampling the policy's current weights are pushed into it when an optimizer step changed them:
for LoRA each adapted weight is merged into a new tensor, one layer at a time
(``aura.train.lora_views.merged_weights``: the policy's own weights are never written, so its base, which is
also the reference, does not drift by the rounding of an in-place merge and unmerge), names cleaned of
peft's prefixes, as TRL's colocate mode does; other peft models (QLoRA's 4-bit layers) are merged into
their base and unmerged again by peft. Sampling uses the run's
temperature, top-p, top-k, stop ids and strings, and each row's sampling key as its seed, so a resumed run
asks vLLM for the same samples (vLLM's kernels may still differ from run to run in the last bits).

* vLLM's ``external_launcher`` backend reads RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT:
  a single ``aura finetune`` (no torchrun) sets them for one process while the engine starts
  (``launch_env``), as TRL's colocate mode does, and takes them out again; under torchrun they are torchrun's.
* The engine's context is the longest prompt plus ``--max-completion-length`` (``max_model_len``), not the
  model's whole window, whose KV cache would not fit in its share of the memory.
* It returns the log-probabilities of the tokens it sampled (``logprobs_mode="processed_logprobs"``: after
  temperature and top-p/top-k, as the loss computes them), and the GRPO loss weights each token by the
  truncated importance ratio (``aura.train.objectives.grpo``).
* QLoRA is refused with vLLM (``grpo_args``): its 4-bit base cannot be pushed into vLLM's bf16 weights.
* With ``--vllm-sleep`` (CUDA: vLLM's sleep mode exists there only; off by default, as TRL's
  ``vllm_enable_sleep_mode``) the engine sleeps between rollouts: level 2 frees its weights and KV cache for the
  training step; before a rollout it wakes its weight buffers, takes the current weights (all of them: level 2
  kept none), then wakes its KV cache, and goes back to sleep once the rollout's completions are out. Aura's
  memory plan still reserves ``--vllm-gpu-memory`` for vLLM (vLLM needs that share free again at each rollout,
  beside the training state), so sleeping pays only where the training step's own peak needs the room.

Never run on a GPU yet (vLLM needs CUDA and no lent device had it installed); the PyTorch engine is the
reference path.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import torch

from aura.train.lora_views import merged_weights

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # Aura's --precision -> vLLM's dtype
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def single_process_env(environ: dict | None = None) -> dict[str, str]:
    """The variables vLLM's ``external_launcher`` needs, for a process that torchrun did not start (empty
    under torchrun: they are all set). A free local port for the group of one."""
    environ = os.environ if environ is None else environ
    if all(k in environ for k in LAUNCH_VARS):
        return {}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wanted = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return {k: v for k, v in wanted.items() if k not in environ}


@contextlib.contextmanager
def launch_env() -> Iterator[None]:
    """``single_process_env`` set for the engine's start only, and taken out again: left in the environment
    they would make everything after it in this process (the next pipeline stage, a check of the GPU suite)
    believe it runs under torchrun."""
    added = single_process_env()
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def model_len(longest_prompt: int, max_completion: int) -> int:
    """vLLM's ``max_model_len``: the longest prompt and completion, rounded up to a block of 16 tokens."""
    return -(-(longest_prompt + max_completion) // 16) * 16


class VLLMGenerator:
    def __init__(self, model, *, base_name: str, sampling, cfg, dist, max_model_len: int, precision: str = "bf16"):
        from vllm import LLM

        self.model, self.sampling, self.dist = model, sampling, dist
        self.sleeps = bool(getattr(cfg, "vllm_sleep", False)) and torch.device(dist.device).type == "cuda"
        with launch_env():
            # the run's compute dtype (vLLM's default would be the config's, fp32 for a model saved in fp32), and
            # as many sequences at once as this rank samples in a window (TRL's max_num_seqs)
            self.llm = LLM(
                model=base_name,
                gpu_memory_utilization=cfg.vllm_gpu_memory,
                max_model_len=max_model_len,
                seed=dist.rank,
                distributed_executor_backend="external_launcher",
                enable_prefix_caching=True,
                trust_remote_code=cfg.trust_remote_code,
                max_num_batched_tokens=max(4096, max_model_len),
                logprobs_mode="processed_logprobs",
                dtype=VLLM_DTYPES.get(precision, "auto"),
                max_num_seqs=max(cfg.batch_size * cfg.gradient_accumulation_steps, 1),
                enable_sleep_mode=self.sleeps,
            )
        self._synced_version = None
        if self.sleeps:
            self.llm.sleep(level=2)  # until the first rollout: the first steps' memory is training's

    def _weights_version(self) -> int:
        """Changes whenever an optimizer step updated a trainable parameter (their ``_version`` counters)."""
        return sum(p._version for p in self.model.parameters() if p.requires_grad)

    def _load(self, weights) -> None:
        """Every (name, tensor) of ``weights`` into vLLM's copy of the model: its in-place reload (vLLM >= 0.2x:
        the layers are re-processed after loading, as the CPU backend's repacked weights require), else the
        model's own ``load_weights`` (older vLLM; what TRL's colocate mode calls)."""
        executor = self.llm.llm_engine.model_executor
        worker = getattr(executor.driver_worker, "worker", executor.driver_worker)
        if hasattr(worker, "reload_weights"):
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
            )
        else:
            worker.model_runner.model.load_weights(weights)

    @torch.no_grad()
    def sync(self) -> None:
        version = self._weights_version()
        if version == self._synced_version:
            return
        merged = merged_weights(self.model)
        if merged is not None:
            self._load(merged)
            self.llm.reset_prefix_cache()
            self._synced_version = version
            return
        peft = hasattr(self.model, "merge_adapter")
        if peft:
            self.model.merge_adapter()
        try:
            weights = []
            for name, param in self.model.named_parameters():
                if peft:
                    if "lora_" in name or "modules_to_save" in name:
                        continue
                    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                weights.append((name, param.data))
            self._load(weights)
        finally:
            if peft:
                self.model.unmerge_adapter()
        self.llm.reset_prefix_cache()
        self._synced_version = version

    def __call__(self, prompt_ids: list[list[int]], keys: list[int]) -> tuple[list[list[int]], list[list[float]]]:
        """(completion ids, the sampler's log-prob of each of their tokens) per prompt row."""
        if self.sleeps:
            torch.cuda.empty_cache()  # the allocator's idle blocks back to the driver, for vLLM's buffers
            self.llm.wake_up(tags=["weights"])
            self._synced_version = None  # level 2 kept no weights: every one is pushed again
        self.sync()
        if self.sleeps:
            self.llm.wake_up(tags=["kv_cache"])
        try:
            return self._generate(prompt_ids, keys)
        finally:
            if self.sleeps:
                self.llm.sleep(level=2)

    def _generate(self, prompt_ids: list[list[int]], keys: list[int]) -> tuple[list[list[int]], list[list[float]]]:
        from vllm import SamplingParams

        s = self.sampling
        # one seed per row (its key): the G rows of a prompt must not draw the same completion
        params = [
            SamplingParams(
                n=1,
                max_tokens=s.max_new_tokens,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=s.top_k if s.top_k else -1,
                stop_token_ids=list(s.stop_ids),
                stop=list(s.stop_strings) or None,
                include_stop_str_in_output=True,
                seed=key % (2**31 - 1),
                logprobs=0,
            )  # 0: the sampled token's own log-prob
            for key in keys
        ]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        ids = [list(o.outputs[0].token_ids) for o in outputs]
        logps = [[step[t].logprob for t, step in zip(row, o.outputs[0].logprobs)] for row, o in zip(ids, outputs)]
        return ids, logps

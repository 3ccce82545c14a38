"""``aura serve``: an OpenAI-compatible server on the engine that fits the model (``command.py``: the command,
``engines.py``: transformers serve, llama-cpp-python's server, vLLM's)."""

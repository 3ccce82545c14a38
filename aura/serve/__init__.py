"""``aura serve``: an OpenAI-compatible server on the engine that fits the model (``serve_command.py``: the command,
``servers.py``: transformers serve, llama-cpp-python's server, vLLM's)."""

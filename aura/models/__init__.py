"""Models: presets -> Hugging Face configs, parameter and FLOP counts, the hardware they run on (detection,
memory model, `auto`), and the adapter/base checks."""

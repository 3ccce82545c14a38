"""Task evaluation: Aura's offline Spanish suite (aura-es), its batched scorer, lm-evaluation-harness
tasks, and the evaluator that runs the suite during training."""

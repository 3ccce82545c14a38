"""What a run is: its setup (session), checkpoints, plan and resume checks, output-dir guard, checkpoint
policy, best model, metrics and the fine-tuning memory model."""

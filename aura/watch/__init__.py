"""Watching runs and machines: `aura runs`, `aura plot`, `aura monitor`, `aura doctor`; the reader of run
directories that every front end uses."""

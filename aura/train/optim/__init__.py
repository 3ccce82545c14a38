"""Optimisation: the step engine (precision, scaler, LR, clipping, optimizer) and its DeepSpeed twin."""

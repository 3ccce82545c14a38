"""Multi-process and multi-node tooling: ``aura launch``, ``aura check-dist``, sharded checkpoints.

Process-group set-up and ``parallelize`` live in ``aura.distributed``; this package holds the
commands around them and must stay cheap to import (the CLI imports one module of it per command).
"""

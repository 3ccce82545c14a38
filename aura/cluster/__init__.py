"""Running on several processes and machines: `aura launch` (torchrun from NNODES/NODE_RANK/...),
`aura check-dist`, and the diagnosis of their failures."""

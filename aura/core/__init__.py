"""Foundations every layer uses: errors, messages (es/en), console, typed configs, atomic writes, staged
directories, ownership markers, the run-directory layout, hub access. Imports nothing else of Aura."""

"""Web-corpus curation on datatrove (``aura data curate``): extraction, Unicode repair, language ID,
Spanish quality filters, exact and MinHash deduplication, PII masking, with a per-stage report.

Modules: ``command`` (config and the command), ``pipeline`` (the datatrove stages and how they run),
``readers`` (inputs), ``steps`` (small datatrove steps), ``spanish`` (Spanish filters and tokenizer),
``langid`` (offline language ID), ``pii`` (masking), ``report`` (stats, table, plot, samples).
"""

import os

# datatrove's tqdm bars (dedup stages) would interleave with Aura's one line per stage; tqdm reads this
# variable when it is first imported, so it is set here, before any datatrove import.
os.environ.setdefault("TQDM_DISABLE", "1")

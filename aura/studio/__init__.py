"""``aura studio``: a web page (and its JSON API) to list, watch, compare, launch, stop and resume runs.

Run folders are read only through :mod:`aura.watch.runs` (the reader ``aura runs`` uses); the page's
scripts, styles and chart code (uPlot, vendored from npm) ship in ``aura/studio/static``.
"""

"""Records of Hugging Face datasets: a directory saved with ``save_to_disk``, or a dataset on the hub
streamed by name (``datasets.load_dataset(..., streaming=True)``: nothing is downloaded whole, so FineWeb-2's
Spanish subset, ``HuggingFaceFW/fineweb-2`` config ``spa_Latn``, is read as far as a run needs).

A reader that is one of several tasks (``ReaderOptions.task = (index, count)``, ``aura data curate``'s
tasks) reads its share: of a stream with at least as many files as tasks, whole files (file i goes to task
i mod count: a task never downloads another's files, and with a document limit the tasks together read the
dataset's first files); of a stream with fewer files, every ``count``-th record (datasets'
``split_dataset_by_node``: each task reads the whole stream, so use as many tasks as files at most); of a
saved dataset, a contiguous block of rows."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from aura.core.errors import AuraError
from aura.text.fields import other_fields, record_text
from aura.text.sources import M, Source


def _rows(ds, *, source: Source, opts, stats: Counter, name: str) -> Iterator[tuple[str, dict | None]]:
    columns = list(ds.column_names or [])
    if columns and opts.text_field not in columns:
        raise AuraError(M("missing_column", path=name, field=opts.text_field, found=", ".join(columns)))
    total = getattr(ds, "num_rows", None)
    for i, batch in enumerate(ds.iter(batch_size=1000)):
        texts = batch[opts.text_field]
        others = [c for c in batch if c != opts.text_field] if opts.keep_fields else []
        for j, value in enumerate(texts):
            if isinstance(value, str):
                yield (
                    value,
                    (other_fields({c: batch[c][j] for c in others}, opts.text_field) if opts.keep_fields else None),
                )
            else:
                stats["bad_records"] += 1
        if total:
            source.position = min(source.bytes, int(source.bytes * (i + 1) * 1000 / total))


def _pick_split(ds, *, name: str, split: str):
    if hasattr(ds, "keys") and not hasattr(ds, "column_names") or type(ds).__name__.endswith("DatasetDict"):
        if split not in ds:
            raise AuraError(M("hf_split", path=name, split=split, have=", ".join(ds.keys())))
        return ds[split]
    return ds


def _share(ds, opts):
    index, count = opts.task
    if count <= 1:
        return ds
    from datasets.distributed import split_dataset_by_node

    if (getattr(ds, "num_shards", 0) or 0) >= count and not hasattr(ds, "num_rows"):  # a stream of files
        return ds.shard(num_shards=count, index=index, contiguous=False)
    return split_dataset_by_node(ds, rank=index, world_size=count)


def hf_disk_records(source: Source, opts, stats: Counter) -> Iterator[tuple[str, dict | None]]:
    import datasets

    try:
        ds = datasets.load_from_disk(source.path)
    except Exception as e:  # damaged arrow files, version mismatch
        raise AuraError(M("hf_failed", name=source.path, err=e)) from None
    ds = _share(_pick_split(ds, name=source.path, split=opts.split), opts)
    yield from _rows(ds, source=source, opts=opts, stats=stats, name=source.path)


def hf_hub_records(source: Source, opts, stats: Counter) -> Iterator[tuple[str, dict | None]]:
    import datasets

    try:
        ds = datasets.load_dataset(source.path, opts.hf_config, split=opts.split, streaming=True)
        columns = ds.column_names
    except Exception as e:  # no connection, unknown name/config/split
        raise AuraError(M("hf_failed", name=source.path, err=e)) from None
    if columns is not None and opts.text_field not in columns:
        raise AuraError(M("missing_column", path=source.path, field=opts.text_field, found=", ".join(columns)))
    for n, record in enumerate(_share(ds, opts), 1):
        text = record_text(record, source=source, opts=opts, stats=stats, where=n)
        if text is not None:
            yield text, other_fields(record, opts.text_field) if opts.keep_fields else None

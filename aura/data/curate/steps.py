"""Small datatrove steps the Aura pipeline adds around datatrove's own: a meter per stage, HTML-only
extraction, rank-aligned shard reading and writing, a sample writer for removed documents, and
reproducible gzip (no timestamp in the header, so a resumed run writes byte-identical shards).
"""

from __future__ import annotations

from collections import Counter
from gzip import GzipFile

import fsspec.compression
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.minhash import MinhashDedupSignature
from datatrove.pipeline.extractors.base import ExtractorSandbox
from datatrove.pipeline.extractors.trafilatura import Trafilatura
from datatrove.pipeline.readers.jsonl import JsonlReader
from datatrove.pipeline.writers.jsonl import JsonlWriter
from datatrove.utils.typeshelper import StatHints

GZIP = "gzip-reproducible"  # gzip with mtime 0 and no file name: same bytes for the same content
fsspec.compression.register_compression(
    GZIP,
    lambda f, mode="rb", **kw: GzipFile(filename="", fileobj=f, mode=mode, mtime=0, compresslevel=6),
    [],
    force=True,
)

METER = "📏 Meter"


def shard_name(rank: int) -> str:
    return f"{rank:05d}.jsonl.gz"


class Meter(PipelineStep):
    """Counts the documents and characters that pass this point; the report reads one meter per stage."""

    type = METER

    def __init__(self, stage: str):
        self.stage = stage
        self.name = stage  # before PipelineStep.__init__, which names the stats after it
        super().__init__()

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            self.stat_update("docs")
            self.stat_update("chars", value=len(doc.text))
            yield doc


class HtmlExtractor(Trafilatura):
    """datatrove's Trafilatura extractor, applied only to documents marked ``format == "html"``.

    Plain text (WET records, JSONL, txt) passes unchanged. An empty extraction or a timeout removes the
    document with a reason, as the other filters do.
    """

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with ExtractorSandbox(timeout=self.timeout, warmup_text="") as extractor:
            for doc in data:
                self.stat_update(StatHints.total)
                if doc.metadata.get("format") != "html":
                    self.stat_update(StatHints.forwarded)
                    yield doc
                    continue
                with self.track_time():
                    try:
                        doc.text = extractor.process_document(doc.text, self.extract) or ""
                    except TimeoutError:
                        self.stat_update(StatHints.dropped, "dropped_extract_timeout")
                        continue
                    except Exception:  # trafilatura/lxml failures on broken markup
                        self.stat_update(StatHints.dropped, "dropped_extract_error")
                        continue
                doc.metadata["format"] = "text"
                if doc.text.strip():
                    self.stat_update(StatHints.forwarded)
                    yield doc
                else:
                    self.stat_update(StatHints.dropped, "dropped_extract_empty")


class ShardWriter(JsonlWriter):
    """JSONL writer of one shard per task, ``NNNNN.jsonl.gz``, created even when the task keeps nothing
    (so a re-run of a task always replaces what an interrupted attempt left)."""

    def __init__(self, output_folder: str):
        super().__init__(output_folder, output_filename="${rank}.jsonl.gz", compression=GZIP)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with self:
            self._get_output_file_with_retry(shard_name(rank))
            for document in data:
                with self.track_time():
                    self.write(document, rank)
                yield document


class ShardReader(JsonlReader):
    """Reads the shard of its own rank, ``NNNNN.jsonl.gz`` (document order = the order the writer saw,
    which the dedup stages rely on)."""

    def __init__(self, data_folder: str):
        super().__init__(data_folder, compression=GZIP, add_file_path=False)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        if self.data_folder.exists(shard_name(rank)):
            yield from self.read_file(shard_name(rank))


class SampleWriter(JsonlWriter):
    """Exclusion writer that keeps the first ``per_reason`` removed documents of each reason, per task."""

    def __init__(self, output_folder: str, *, per_reason: int, default_reason: str):
        super().__init__(output_folder, output_filename="${reason}/${rank}.jsonl", compression=None)
        self.per_reason = per_reason
        self.default_reason = default_reason
        self.counts: Counter = Counter()

    def write(self, document, rank: int = 0, **kwargs):
        reason = document.metadata.get("filter_reason") or self.default_reason
        if self.counts[reason] >= self.per_reason:
            return
        self.counts[reason] += 1
        document.metadata["filter_reason"] = reason
        super().write(document, rank, reason=reason)


def xxhash64_text(text: str) -> int:
    import xxhash

    return xxhash.xxh64_intdigest(text.encode("utf-8"))


class MinhashSignature(MinhashDedupSignature):
    """datatrove's MinHash signatures with its default xxhash, fed bytes: datatrove 0.10.1 hands the
    shingle text (a str) to xxhash, which xxhash 3.8 refuses ("Strings must be encoded before hashing")."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.config.hash_config.hash_fc == "xxhash" and self.config.hash_config.precision == 64:
            self._hash_func = xxhash64_text

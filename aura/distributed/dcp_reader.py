"""Reading torch.distributed.checkpoint (DCP) directories without running code from them.

DCP stores its metadata (``.metadata``) as a pickle and loads non-tensor values (the optimizer's
``param_groups``: learning rate, betas...) with ``torch.load(weights_only=False)``: a crafted
checkpoint would run code on resume. ``SafeReader`` unpickles the metadata with an unpickler that
builds only DCP's own metadata classes (and dtypes, sizes, paths), and keeps every storage file inside
the checkpoint directory; ``SafePlanner`` accepts a non-tensor value only when ``torch.load``'s
``weights_only`` unpickler accepts it. Whatever the directory's markers say.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "dcp_reader",
    {
        "unsafe": (
            "{path} pide construir {what}, que no forma parte de un checkpoint distribuido (DCP): Aura no lo carga, "
            "porque deserializarlo podría ejecutar código. El checkpoint está dañado o manipulado; reanuda "
            "desde otro que hayas guardado tú.",
            "{path} asks to build {what}, which is no part of a distributed (DCP) checkpoint: Aura does not load "
            "it, since unpickling it could run code. The checkpoint is damaged or tampered with; resume "
            "from another one you saved yourself.",
        ),
        "outside": (
            "{path} remite al archivo '{file}', fuera del directorio del checkpoint: Aura solo lee archivos "
            "dentro de él. El checkpoint está dañado o manipulado.",
            "{path} refers to the file '{file}', outside the checkpoint directory: Aura reads only files "
            "inside it. The checkpoint is damaged or tampered with.",
        ),
        "unsafe_value": (
            "{path}: el valor '{key}' no es un dato simple ({err}): Aura no lo carga, porque "
            "deserializarlo podría ejecutar código. El checkpoint está dañado o manipulado; reanuda "
            "desde otro que hayas guardado tú.",
            "{path}: the value '{key}' is not plain data ({err}): Aura does not load it, since "
            "unpickling it could run code. The checkpoint is damaged or tampered with; resume from "
            "another one you saved yourself.",
        ),
        "unreadable": (
            "No se pueden leer los metadatos del checkpoint distribuido {path}: {err}",
            "Cannot read the distributed checkpoint's metadata {path}: {err}",
        ),
    },
)

_META = "torch.distributed.checkpoint.metadata"
_ALLOWED = {
    (_META, n)
    for n in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "_MEM_FORMAT_ENCODING",
    )
}
_ALLOWED |= {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
}


class _Refused(pickle.UnpicklingError):
    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes, dtypes, sizes and paths; refuses every other global."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid):
        raise _Refused("persistent_load")


def read_metadata(path: str | os.PathLike):
    """The ``Metadata`` of the DCP file ``path`` (``.metadata``), or AuraError naming what was refused."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except _Refused as e:
        raise AuraError(M("unsafe", path=path, what=e.what)) from None
    except Exception as e:  # noqa: BLE001 - any other failure to parse the file (truncated, garbage, too deep)
        raise AuraError(M("unreadable", path=path, err=str(e)[:200] or type(e).__name__)) from None
    if not isinstance(metadata, Metadata):
        raise AuraError(M("unsafe", path=path, what=type(metadata).__name__))
    return metadata


class SafeReader(FileSystemReader):
    """``FileSystemReader`` whose metadata cannot run code and whose files stay in the directory."""

    def read_metadata(self, *args, **kwargs):
        from torch.distributed.checkpoint.metadata import StorageMeta

        path = self._get_metadata_path(kwargs.get("rank"))
        metadata = read_metadata(path)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        root = Path(self.path).resolve()
        for info in (metadata.storage_data or {}).values():
            rel = str(getattr(info, "relative_path", ""))
            target = (root / rel).resolve()
            if Path(rel).name != rel or rel in ("", ".", "..") or target.parent != root:
                raise AuraError(M("outside", path=path, file=rel))
        return metadata


class SafePlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that loads a non-tensor value (DCP: ``torch.load(weights_only=False)``)
    only once ``torch.load``'s ``weights_only`` unpickler has accepted the same bytes as plain data."""

    def __init__(self, root: str | os.PathLike):
        super().__init__()
        self.root = root

    def load_bytes(self, read_item, value) -> None:
        try:
            torch.load(value, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
            raise AuraError(
                M(
                    "unsafe_value",
                    path=self.root,
                    key=read_item.dest_index.fqn,
                    err=str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__,
                )
            ) from None
        value.seek(0)
        super().load_bytes(read_item, value)


def unwrap(error: BaseException) -> AuraError | None:
    """The AuraError a rank raised inside ``dcp.load`` (which wraps it in a CheckpointException)."""
    for exc, _trace in getattr(error, "failures", {}).values():
        if isinstance(exc, AuraError):
            return exc
    return None

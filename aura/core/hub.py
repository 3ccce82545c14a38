"""Local path or Hugging Face hub name? Decide at once, and never wait for a hub that cannot answer.

Offline, ``from_pretrained("tokenizr/es")`` retries for about a minute before failing. Aura decides
first:

* an existing local path is used as is;
* an argument that looks like a path (absolute, starting with ``.`` or ``~``, more than one ``/``, a
  backslash, or ``a/b`` where ``a`` is an existing local folder) and does not exist fails at once,
  naming it;
* anything else is a hub name: when the hub cannot be reached (a 3-second connection attempt, or
  ``HF_HUB_OFFLINE=1``) it is looked up in the local Hugging Face cache only, and a miss fails with
  one line.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "hub",
    {
        "missing_path": (
            "{flag} {name}: no existe esa ruta. Revisa que esté bien escrita (se interpreta como "
            "una ruta local, no como un nombre del hub de Hugging Face).",
            "{flag} {name}: no such path. Check the spelling (it is read as a local path, not as a "
            "Hugging Face hub name).",
        ),
        "offline": (
            "{flag} {name}: no es una carpeta local, no está en la caché de Hugging Face y no se puede "
            "conectar con el hub ({host}). Revisa la ruta, o conéctate a internet para descargarlo.",
            "{flag} {name}: not a local folder, not in the Hugging Face cache, and the hub ({host}) "
            "cannot be reached. Check the path, or connect to the internet to download it.",
        ),
    },
)

_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


@dataclass(frozen=True)
class Source:
    """What to pass to ``from_pretrained``: ``name`` and whether to stay in the local cache."""

    name: str
    local: bool  # an existing local path
    local_files_only: bool = False


def looks_like_path(name: str) -> bool:
    if os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name:
        return True
    first = name.split("/", 1)[0]
    return "/" in name and Path(first).is_dir()  # "runs/fnal": runs/ is here, so a typo, not a hub repo


def hub_address() -> tuple[str, int]:
    """(host, port) of the hub (``HF_ENDPOINT`` or huggingface.co)."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def hub_host() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub answers a TCP connection (assumed yes behind a proxy, which only it can reach)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return True
    try:
        socket.create_connection(hub_address(), timeout=timeout).close()
        return True
    except OSError:
        return False


def resolve(name_or_path: str | os.PathLike, *, flag: str) -> Source:
    """A local path that exists, or a hub name (cache-only when the hub is unreachable); a missing
    path-looking argument raises at once."""
    name = str(name_or_path)
    local = Path(os.path.expanduser(name))
    if local.exists():
        return Source(str(local), local=True)
    if looks_like_path(name):
        raise AuraError(M("missing_path", flag=flag, name=name))
    return Source(name, local=False, local_files_only=not hub_reachable())


def offline_error(source: Source, *, flag: str) -> AuraError | None:
    """The one-line error for a hub name that failed to load while the hub was unreachable."""
    if source.local or not source.local_files_only:
        return None
    return AuraError(M("offline", flag=flag, name=source.name, host=hub_host()))

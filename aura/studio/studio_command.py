"""``aura studio [RUNS_DIR]``: serve the studio page on HOST:PORT (loopback by default)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.access import token_for
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "studio",
    {
        "no_dir": (
            "{path} no es un directorio (no existe o es un archivo): indica la carpeta de las ejecuciones, "
            "por ejemplo runs.",
            "{path} is not a directory (missing, or a file): give the folder that holds the runs, for example runs.",
        ),
        "bad_port": (
            "--port debe estar entre 1 y 65535; recibido {port}.",
            "--port must be between 1 and 65535; got {port}.",
        ),
        "missing": (
            "aura studio necesita starlette y uvicorn: pip install -e '.[studio]'.",
            "aura studio needs starlette and uvicorn: pip install -e '.[studio]'.",
        ),
        "serving": ("Aura Studio sirve {path} en {url}", "Aura Studio serves {path} at {url}"),
        "token_note": (
            "La dirección no es local: cada petición necesita el token (ya va en el enlace).",
            "The address is not local: every request needs the token (the link carries it).",
        ),
        "stop_note": (
            "Ctrl+C detiene la página; las ejecuciones lanzadas desde ella siguen.",
            "Ctrl+C stops the page; runs started from it keep going.",
        ),
    },
)


@dataclass
class StudioConfig:
    dir: str = arg(
        "",
        es="Directorio de ejecuciones (por defecto ./runs si existe, si no el directorio actual).",
        en="Runs directory (default: ./runs if it exists, else the current directory).",
        positional=True,
        metavar="RUNS_DIR",
    )
    host: str = arg(
        "127.0.0.1",
        es="Dirección donde escuchar (fuera de loopback se exige un token).",
        en="Address to listen on (off loopback a token is required).",
    )
    port: int = arg(7860, es="Puerto.", en="Port.")
    token: str | None = arg(
        None,
        es="Token de acceso (fuera de loopback: se genera uno si no se da).",
        en="Access token (off loopback: one is generated when not given).",
    )

    def __post_init__(self):
        if not self.dir:
            self.dir = "runs" if Path("runs").is_dir() else "."
        if not Path(self.dir).is_dir():
            raise AuraError(M("no_dir", path=self.dir))
        if not 0 < self.port < 65536:
            raise AuraError(M("bad_port", port=self.port))
        self.token = token_for(self.host, self.token)  # the one rule, shared with aura serve


def studio(cfg: StudioConfig) -> int:
    try:
        import uvicorn

        from aura.studio.app import create_app
    except ImportError:
        raise AuraError(M("missing")) from None
    app = create_app(Path(cfg.dir), token=cfg.token)
    shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    url = f"http://{shown}:{cfg.port}/" + (f"?token={cfg.token}" if cfg.token else "")
    console.info(M("serving", path=Path(cfg.dir).resolve(), url=url))
    if cfg.token:
        console.info(M("token_note"))
    console.info(M("stop_note"))
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")
    return 0

"""Typed command configs: one dataclass per command, one flag per field, an optional YAML file.

A field is declared with ``arg``, which carries its help in both languages::

    @dataclass
    class PrepareConfig:
        inputs: list[str] = arg([], es="Archivos de entrada.", en="Input files.", positional=True)
        workers: int = arg(0, es="Procesos (0 = todos los núcleos).", en="Processes (0 = all cores).")

``build_parser`` turns such a class into an argparse parser (``--workers``, help with the default);
``parse_config`` merges, in order of precedence, explicit flags > ``--config file.yaml`` > defaults,
and builds the dataclass, whose ``__post_init__`` validates it with messages a user can act on.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from aura.core.errors import AuraError
from aura.core.i18n import Messages, bi, current_lang

M = Messages(
    "config",
    {
        "yaml_missing": ("No existe el archivo de configuración {path}.", "The config file {path} does not exist."),
        "yaml_invalid": (
            "El archivo de configuración {path} no es YAML válido: {err}",
            "The config file {path} is not valid YAML: {err}",
        ),
        "yaml_too_deep": ("anidado a demasiada profundidad", "nested too deep"),
        "yaml_not_mapping": (
            "El archivo de configuración {path} debe ser un diccionario clave: valor.",
            "The config file {path} must be a mapping of key: value.",
        ),
        "yaml_unknown": (
            "Clave desconocida '{key}' en {path}.{close} Claves válidas: {valid}.",
            "Unknown key '{key}' in {path}.{close} Valid keys: {valid}.",
        ),
        "yaml_close": (" ¿Querías decir '{name}'?", " Did you mean '{name}'?"),
        "yaml_risky": (
            "{path} activa '{key}: {value}'. Esta opción {what}; comprueba que el archivo es tuyo y "
            "que de verdad quieres activarla.",
            "{path} sets '{key}: {value}'. This option {what}; check that the file is yours and "
            "that you really mean to turn it on.",
        ),
        "risky_code": (
            "ejecuta código descargado del modelo o tokenizador",
            "runs code downloaded with the model or tokenizer",
        ),
        "risky_replace": ("reemplaza resultados que ya existen", "replaces results that already exist"),
        "bad_value": (
            "Valor no válido para {field}: {value!r} (se esperaba {expected}).",
            "Invalid value for {field}: {value!r} (expected {expected}).",
        ),
        "default": ("por defecto", "default"),
        "old_flag": (
            "{old} es el nombre antiguo de {new} (el mismo en todos los comandos): sigue funcionando, pero usa {new}.",
            "{old} is the old name of {new} (the same in every command): it still works, but use {new}.",
        ),
        "config_help": (
            "Archivo YAML con valores para estas opciones (las opciones de la línea de comandos tienen prioridad).",
            "YAML file with values for these options (command-line flags win).",
        ),
    },
)


def arg(
    default: Any = dataclasses.MISSING,
    *,
    es: str,
    en: str,
    positional: bool = False,
    choices: typing.Sequence[Any] | None = None,
    metavar: str | None = None,
    short: str | None = None,
    hidden: bool = False,
    remainder: bool = False,
    aliases: typing.Sequence[str] = (),
    deprecated: typing.Sequence[str] = (),
) -> Any:
    """A config field with bilingual help. Mutable defaults (lists, dicts) are copied per instance.

    ``remainder=True`` (a positional list) takes every argument from the first positional on,
    flags included, as ``torchrun`` does with its script's arguments (``aura launch``).
    ``aliases``: older spellings of the flag (``"--validation-split"``) that still parse, on the command
    line and as YAML keys, and are listed in ``--help`` after the flag's own name.
    ``deprecated``: retired names of the flag (``"--force"`` for ``--overwrite``): they still parse, on
    the command line and as YAML keys, with a warning naming the flag to use; ``--help`` does not list them.
    """
    meta = {
        "help": (es, en),
        "positional": positional or remainder,
        "choices": choices,
        "metavar": metavar,
        "short": short,
        "hidden": hidden,
        "remainder": remainder,
        "aliases": tuple(aliases),
        "deprecated": tuple(deprecated),
    }
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def unwrap_optional(tp):
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _describe(tp) -> str:
    tp, _ = unwrap_optional(tp)
    if get_origin(tp) is Literal:
        return " | ".join(map(str, get_args(tp)))
    if get_origin(tp) in (list, tuple):
        return bi("lista de ", "list of ") + _describe(get_args(tp)[0])
    name = getattr(tp, "__name__", str(tp))
    return bi(_TYPE_ES.get(name, name), name)


_TYPE_ES = {"int": "un entero", "float": "un número", "str": "un texto", "bool": "true o false", "Path": "una ruta"}


def flag_name(field: str) -> str:
    """The flag a user types for a config field: ``max_steps`` -> ``--max-steps``."""
    return "--" + field.replace("_", "-")


def coerce(name: str, tp, value, *, shown: str | None = None):
    """Convert a YAML or string value to the field's type, or raise a clear AuraError naming the flag
    (or ``shown``: the YAML key as the user wrote it)."""
    tp, optional = unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise AuraError(M("bad_value", field=shown or flag_name(name), value=value, expected=_describe(tp)))
    origin = get_origin(tp)
    try:
        if origin is Literal:
            allowed = get_args(tp)
            for a in allowed:
                if value == a or str(value) == str(a):
                    return a
            raise ValueError
        if origin in (list, tuple):
            inner = get_args(tp)[0]
            items = value if isinstance(value, (list, tuple)) else [value]
            return [coerce(name, inner, v, shown=shown) for v in items]
        if tp is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "si", "sí", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
        if tp is float:
            return float(value)
        if tp is str:
            return str(value)
        if tp is Path:
            return Path(value)
        return value
    except (TypeError, ValueError):
        raise AuraError(M("bad_value", field=shown or flag_name(name), value=value, expected=_describe(tp))) from None


def fields_of(cls) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init]


def default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def build_parser(cls, *, prog: str, description: str) -> argparse.ArgumentParser:
    parser = AuraArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--config", metavar="FILE.yaml", help=M("config_help"))
    for f, tp in fields_of(cls):
        meta = f.metadata
        if not meta or meta.get("hidden"):
            continue
        es, en = meta["help"]
        default = default_of(f)
        base, _ = unwrap_optional(tp)
        help_text = bi(es, en)
        if default is not dataclasses.MISSING and default not in (None, [], ""):
            shown = " ".join(map(str, default)) if isinstance(default, list) else default
            help_text += f" ({M('default')}: {shown})"
        kwargs: dict[str, Any] = {"help": help_text.replace("%", "%%")}  # argparse %-formats help
        choices = meta.get("choices")
        if get_origin(base) is Literal:
            choices = list(get_args(base))
        if choices:
            kwargs["choices"] = list(choices)
        if meta.get("metavar"):
            kwargs["metavar"] = meta["metavar"]
        if meta.get("positional"):
            kwargs["nargs"] = (
                ("*" if get_origin(base) in (list, tuple) else "?") if not meta.get("remainder") else argparse.REMAINDER
            )
            parser.add_argument(f.name, **kwargs)
            continue
        names = [flag_name(f.name), *meta.get("aliases", ())]
        if meta.get("short"):
            names.insert(0, meta["short"])
        if base is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif get_origin(base) in (list, tuple):  # `--reward a b` and `--reward a --reward b` both give [a, b]
            kwargs.update(nargs="+", action="extend")
        parser.add_argument(*names, dest=f.name, **kwargs)
        for old in meta.get("deprecated", ()):  # a retired name: parses like the flag, says the new one
            old_kwargs = {k: v for k, v in kwargs.items() if k not in ("help", "action")}
            if base is bool:
                old_kwargs["nargs"] = 0
            parser.add_argument(
                old,
                dest=f.name,
                help=argparse.SUPPRESS,
                action=_DeprecatedFlag,
                new=flag_name(f.name),
                flag_is_bool=base is bool,
                **old_kwargs,
            )
    return parser


class _DeprecatedFlag(argparse.Action):
    """A retired flag name: stores like the flag it became (True for a switch) and warns once per use."""

    def __init__(self, option_strings, dest, *, new: str, flag_is_bool: bool, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.flag_is_bool = new, flag_is_bool

    def __call__(self, parser, namespace, values, option_string=None):
        from aura.core import console

        console.warn(M("old_flag", old=option_string, new=self.new))
        setattr(namespace, self.dest, True if self.flag_is_bool else values)


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise AuraError(M("yaml_missing", path=p))
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise AuraError(M("yaml_invalid", path=p, err=e)) from None
    except RecursionError:  # PyYAML recurses once per nesting level
        raise AuraError(M("yaml_invalid", path=p, err=M("yaml_too_deep"))) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AuraError(M("yaml_not_mapping", path=p))
    return data


# Options that run foreign code or replace existing results: never applied silently from a file.
_RISKY = {"trust_remote_code": "risky_code", "force": "risky_replace", "overwrite": "risky_replace"}


def parse_config(cls, argv: list[str], *, prog: str, description: str):
    """argv -> an instance of ``cls``: explicit flags > YAML file > field defaults."""
    parser = build_parser(cls, prog=prog, description=description)
    ns = vars(parser.parse_args(argv))
    values: dict[str, Any] = {}
    types_by_name = {f.name: tp for f, tp in fields_of(cls)}
    config_path = ns.pop("config", None)
    if config_path:
        values.update(mapping_values(cls, load_yaml(config_path), where=str(config_path), explicit=set(ns)))
    for name, value in ns.items():
        values[name] = coerce(name, types_by_name[name], value)
    return cls(**values)


def mapping_values(
    cls,
    mapping: dict,
    *,
    where: str,
    explicit: typing.Collection[str] = (),
    shown: typing.Callable[[str], str] = lambda key: f"'{key}'",
) -> dict[str, Any]:
    """A YAML mapping (a ``--config`` file, a pipeline stage's ``options``) -> field values of ``cls``:
    keys as flags or field names (aliases too), each coerced to its field's type. An unknown key is an
    AuraError naming ``where``, the closest key and every valid one; ``explicit`` names the fields a
    command-line flag sets (a risky option from the file is then not warned about)."""
    types_by_name = {f.name: tp for f, tp in fields_of(cls)}
    alias_of = {
        a.lstrip("-").replace("-", "_"): f.name
        for f, _ in fields_of(cls)
        for a in (f.metadata or {}).get("aliases", ())
    }
    retired = {
        a.lstrip("-").replace("-", "_"): f.name
        for f, _ in fields_of(cls)
        for a in (f.metadata or {}).get("deprecated", ())
    }
    values: dict[str, Any] = {}
    for key, value in mapping.items():
        name = str(key).replace("-", "_")
        if name in retired:
            from aura.core import console

            console.warn(M("old_flag", old=f"'{key}' ({where})", new=f"'{retired[name]}'"))
        name = alias_of.get(name, retired.get(name, name))
        if name not in types_by_name:
            import difflib

            close = difflib.get_close_matches(name, list(types_by_name), n=1, cutoff=0.6)
            raise AuraError(
                M(
                    "yaml_unknown",
                    key=key,
                    path=where,
                    close=M("yaml_close", name=close[0]) if close else "",
                    valid=", ".join(sorted(types_by_name)),
                )
            )
        values[name] = coerce(name, types_by_name[name], value, shown=shown(str(key)))
        if name in _RISKY and values[name] and name not in explicit:  # a flag on the command line wins
            from aura.core import console

            written = str(value).lower() if isinstance(value, bool) else value  # as YAML writes it
            console.warn(M("yaml_risky", path=where, key=key, value=written, what=M(_RISKY[name])))
    return values


def to_dict(cfg) -> dict[str, Any]:
    """A JSON-friendly dict of a config (for model_config.json, checkpoints, meta files)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = str(v) if isinstance(v, Path) else v
    return out


# ---------------------------------------------------------------- argparse in the user's language

# argparse's own strings (it looks them up through gettext's ``_`` at call time). Only those a user
# can see; programming errors in a parser definition stay in English.
ARGPARSE_ES = {
    "usage: ": "uso: ",
    "positional arguments": "argumentos posicionales",
    "options": "opciones",
    "optional arguments": "opciones",
    "show this help message and exit": "muestra esta ayuda y termina",
    "%(prog)s: error: %(message)s\n": "%(prog)s: error: %(message)s\n",
    "%(prog)s: warning: %(message)s\n": "%(prog)s: aviso: %(message)s\n",
    "unrecognized arguments: %s": "argumentos no reconocidos: %s",
    "invalid choice: %(value)r (choose from %(choices)s)": "opción no válida: %(value)r (elige entre %(choices)s)",
    "the following arguments are required: %s": "faltan estos argumentos obligatorios: %s",
    "one of the arguments %s is required": "hace falta uno de estos argumentos: %s",
    "argument %(argument_name)s: %(message)s": "argumento %(argument_name)s: %(message)s",
    "expected one argument": "se esperaba un valor",
    "expected at most one argument": "se esperaba como mucho un valor",
    "expected at least one argument": "se esperaba al menos un valor",
    "invalid %(type)s value: %(value)r": "valor %(type)s no válido: %(value)r",
    "ambiguous option: %(option)s could match %(matches)s": "opción ambigua: %(option)s puede ser %(matches)s",
    "not allowed with argument %s": "no se permite junto con el argumento %s",
    "ignored explicit argument %r": "se ignora el valor explícito %r",
    "unexpected option string: %s": "opción inesperada: %s",
    "can't open '%(filename)s': %(error)s": "no se puede abrir '%(filename)s': %(error)s",
    "option '%(option)s' is deprecated": "la opción '%(option)s' está obsoleta",
    "argument '%(argument_name)s' is deprecated": "el argumento '%(argument_name)s' está obsoleto",
    "command '%(parser_name)s' is deprecated": "el comando '%(parser_name)s' está obsoleto",
}
ARGPARSE_ES_PLURAL = {
    ("expected %s argument", "expected %s arguments"): ("se esperaba %s valor", "se esperaban %s valores"),
}

M_ARGPARSE = Messages(
    "config.argparse",
    {
        "help_hint": (
            "Ejecuta '{prog} --help' para ver todas las opciones.",
            "Run '{prog} --help' to see every option.",
        ),
        "did_you_mean": (" ¿Quisiste decir {flag}?", " Did you mean {flag}?"),
    },
)


def _argparse_gettext(message: str) -> str:
    import gettext

    if current_lang() == "es":
        return ARGPARSE_ES.get(message, message)
    return gettext.gettext(message)


def _argparse_ngettext(singular: str, plural: str, n: int) -> str:
    import gettext

    if current_lang() == "es" and (singular, plural) in ARGPARSE_ES_PLURAL:
        es_singular, es_plural = ARGPARSE_ES_PLURAL[(singular, plural)]
        return es_singular if n == 1 else es_plural
    return gettext.ngettext(singular, plural, n)


def install_argparse_translation() -> None:
    """Make argparse speak the user's language (it reads ``_``/``ngettext`` at call time)."""
    argparse._ = _argparse_gettext  # type: ignore[attr-defined]
    argparse.ngettext = _argparse_ngettext  # type: ignore[attr-defined]


class AuraArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors in two lines in the user's language (no usage dump: the second line points
    to --help), the closest real flag for a mistyped one, and exit status 2."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            message = _argparse_gettext("unrecognized arguments: %s") % " ".join(extras)
            close = self.closest_flag(next((a for a in extras if a.startswith("-")), ""))
            self.error(message + ("." + M_ARGPARSE("did_you_mean", flag=close) if close else ""))
        return ns

    def closest_flag(self, typed: str) -> str | None:
        """The parser's own flag nearest to ``typed`` (``--modelpreset`` -> ``--model-preset``), or None."""
        import difflib

        if not typed.startswith("--"):
            return None
        flags = [
            o
            for a in self._actions
            for o in a.option_strings
            if o.startswith("--") and not isinstance(a, _DeprecatedFlag)
        ]  # never suggest an old name
        flat = {f.replace("-", ""): f for f in flags}  # a missing or extra hyphen is the commonest slip
        name = typed.split("=", 1)[0]
        if name.replace("-", "") in flat:
            return flat[name.replace("-", "")]
        close = difflib.get_close_matches(name, flags, n=1, cutoff=0.75)
        return close[0] if close else None

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(_argparse_gettext("%(prog)s: error: %(message)s\n") % {"prog": self.prog, "message": message})
        sys.stderr.write(M_ARGPARSE("help_hint", prog=self.prog) + "\n")
        raise SystemExit(2)


install_argparse_translation()

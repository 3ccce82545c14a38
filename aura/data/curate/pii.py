"""PII masking for Spanish web text: e-mail, IP addresses, phone numbers, DNI/NIE and IBAN.

Built on datatrove's ``PIIReplacer`` (a regex plus a validator per kind; datatrove's own e-mail and IP
patterns are reused). The Spanish kinds are validated, so numbers that only look like them stay:

- DNI: 8 digits and the check letter ``TRWAGMYFPDXBNJZSQVHLCKE[n % 23]``; NIE: X/Y/Z (read as 0/1/2),
  7 digits and the same check letter;
- IBAN: country code, 2 check digits and the account, accepted when ``int(rearranged) % 97 == 1``
  (ISO 13616), written with or without spaces;
- phones: Spanish numbers (9 digits starting with 6, 7, 8 or 9, optionally +34/0034 and grouped by
  spaces, dots or hyphens) and international numbers written with a ``+`` prefix.

Each kind is replaced by a placeholder a model can learn to leave alone: ``<EMAIL>``, ``<IP>``,
``<TELEFONO>``, ``<DNI>``, ``<IBAN>``.
"""

from __future__ import annotations

import re
from functools import partial

from datatrove.pipeline.formatters.base import BaseFormatter
from datatrove.pipeline.formatters.pii import (
    PIIFormatter,
    PIIReplacer,
    public_ip_validator,
)

PLACEHOLDERS = {"email": "<EMAIL>", "ip": "<IP>", "phone": "<TELEFONO>", "dni": "<DNI>", "iban": "<IBAN>"}
DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"

_DNI = r"(?<![\w-])(?:\d{8}|[XYZxyz][-\s]?\d{7})[-\s]?[A-Za-z](?![\w-])"
_IBAN = r"(?<![\w])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?(?![\w])"
_PHONE = (
    r"(?<![\w+])(?:(?:\+|00)34[\s.-]?)?[6789]\d{2}(?:[\s.-]?\d{2,3}){2,3}(?![\w])"
    r"|(?<![\w+])\+(?!34)\d{1,3}[\s.-]?\(?\d{1,4}\)?(?:[\s.-]?\d{2,4}){2,4}(?![\w])"
)


def valid_dni(match: str) -> bool:
    """DNI (8 digits + letter) or NIE (X/Y/Z + 7 digits + letter) with the right check letter."""
    s = re.sub(r"[\s-]", "", match).upper()
    body, letter = s[:-1], s[-1]
    if body[0] in "XYZ":
        body = str("XYZ".index(body[0])) + body[1:]
    return body.isdigit() and DNI_LETTERS[int(body) % 23] == letter


def valid_iban(match: str) -> bool:
    """ISO 13616 check: move the first four characters to the end, letters to numbers, mod 97 == 1."""
    s = match.replace(" ", "")
    if not 15 <= len(s) <= 34:
        return False
    rearranged = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def valid_phone(match: str) -> bool:
    """A Spanish number has 9 digits after its optional +34/0034; an international one 9 to 15."""
    digits = re.sub(r"\D", "", match)
    if match.startswith("+") and not match.startswith("+34"):
        return 9 <= len(digits) <= 15
    if match.startswith(("+34", "0034")):
        digits = digits[4:] if match.startswith("0034") else digits[2:]
    return len(digits) == 9


class SpanishPIIFormatter(BaseFormatter):
    """Masks e-mail, public IPs, phones, DNI/NIE and IBAN with placeholders; counts each kind in the stats."""

    name = "🕵 Spanish PII"

    def __init__(
        self, *, emails: bool = True, ips: bool = True, phones: bool = True, ids: bool = True, ibans: bool = True
    ):
        super().__init__()
        email_pattern = PIIFormatter(remove_ips=False).emails_replacer.regex.pattern
        kinds = [
            ("iban", ibans, _IBAN, valid_iban),
            ("email", emails, email_pattern, None),
            ("dni", ids, _DNI, valid_dni),
            (
                "ip",
                ips,
                r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|[01]?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|[01]?\d?\d)"
                r"(?!\.?\d)",
                partial(public_ip_validator, public_only=True),
            ),
            ("phone", phones, _PHONE, valid_phone),
        ]
        self.replacers = [
            (kind, PIIReplacer(pattern, PLACEHOLDERS[kind], validator)) for kind, on, pattern, validator in kinds if on
        ]

    def format(self, text: str) -> str:
        for kind, replacer in self.replacers:
            placeholder = PLACEHOLDERS[kind]
            before = text.count(placeholder)
            text = replacer.replace(text)
            if (found := text.count(placeholder) - before) > 0:
                self.stat_update(f"masked_{kind}", value=found)
        return text

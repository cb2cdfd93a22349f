"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1.5``, ``2e3``) as exact decimals.

The grammar is the API server's (apimachinery ``resource.Quantity``)::

    quantity ::= sign? number suffix
    number   ::= digits | digits "." digits? | "." digits
    suffix   ::= "" | binary SI (Ki Mi Gi Ti Pi Ei) | decimal SI (n u m k M G T P E)
               | ("e" | "E") sign? digits

So ``1K``, ``1ki``, ``NaN`` and ``1 Gi`` are refused, as ``kubectl apply`` would refuse
them in a Pod's resources.
"""

from __future__ import annotations

import re
from decimal import Decimal

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?\d+))?"
)
_DECIMAL_POWER = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_POWER = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# An exponent past this is taken as this: the value is still far past every limit (or
# below every non-zero one), and Decimal's work stays bounded.
_MAX_EXPONENT = 1000


def parse_quantity(value: int | float | str) -> Decimal:
    """The exact value of a quantity; ``ValueError`` when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        number = Decimal(value)
        if not number.is_finite():
            raise ValueError(f"not a quantity: {value!r}")
        return number
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number = Decimal(match["number"])
    if match["binary"]:
        return number * (1 << _BINARY_POWER[match["binary"]])
    if match["decimal"]:
        return number.scaleb(_DECIMAL_POWER[match["decimal"]])
    if match["exponent"]:
        if len(match["exponent"]) > 6:
            exponent = _MAX_EXPONENT if match["exponent"][0] != "-" else -_MAX_EXPONENT
        else:
            exponent = max(-_MAX_EXPONENT, min(_MAX_EXPONENT, int(match["exponent"])))
        return number.scaleb(exponent)
    return number

"""Secrets kept out of what tensorgauge prints and stores: the password in a URL's user part (or, where
the user name itself can be a token, all of it) and the value of each secret query parameter, masked in
every spelling a message could carry them in (as written, percent-decoded, in pieces)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

MASK = "***"
EVERY_PARAMETER = r"[^=&#]+"  # a query parameter of any name
_SHORTEST_SECRET = 3  # shorter pieces are left: masking every "a" or "12" in a message would garble it


@dataclass(frozen=True)
class UrlSecrets:
    """Which parts of a URL hold secrets: the password of its user part (with ``user``: the whole user
    part), and the value of every query parameter whose name matches ``parameters`` (a regular
    expression, any case)."""

    parameters: str = EVERY_PARAMETER
    user: bool = True

    def user_part(self, url: str) -> tuple[int, int] | None:
        """Where the secret of ``scheme://user:password@host`` lies in ``url``: up to the *last* '@', so
        that a password holding '@', '/' or ':' is all of it (a parser that stops at its first '@' or '/'
        would name the rest as a host or a path in its message)."""
        start = url.find("://")
        if start < 0:
            return None
        start += 3
        at = url.rfind("@")
        if at <= start:
            return None
        if self.user:
            return start, at
        colon = url.find(":", start, at)
        return (colon + 1, at) if colon >= 0 else None

    def found(self, url: str) -> list[str]:
        """The secrets of ``url`` as written: its user part's, and each secret parameter's value."""
        where = self.user_part(url)
        found = [url[where[0]:where[1]]] if where else []
        return found + re.findall(rf"(?i)[?&](?:{self.parameters})=([^&#]*)", url)

    def spellings(self, url: str) -> list[str]:
        """Every spelling of the secrets of ``url``, longest first: as written, percent-decoded, and in
        the pieces a parser may cut them into ('@', '/', ':', '?', '#', '&')."""
        spellings = set()
        for secret in self.found(url):
            spellings |= {secret, unquote(secret), *re.split(r"[@/:?#&]", secret)}
        return sorted((s for s in spellings if len(s) >= _SHORTEST_SECRET and s != MASK), key=len, reverse=True)

    def redact(self, url: str) -> str:
        """``url`` for messages: each secret replaced by ``***``, its shape kept."""
        where = self.user_part(url)
        masked = url[:where[0]] + MASK + url[where[1]:] if where else url
        masked = re.sub(rf"(?i)([?&](?:{self.parameters})=)[^&#]*", rf"\g<1>{MASK}", masked)
        for secret in self.spellings(url):  # spelt another way (percent-encoded, in the path): not shown at all
            masked = masked.replace(secret, MASK)
        return masked

    def scrub(self, text: str, url: str) -> str:
        """``text`` (a library's message, which may quote ``url`` or a piece of it) with no secret of it."""
        text = text.replace(url, self.redact(url))
        for secret in self.spellings(url):
            text = text.replace(secret, MASK)
        return text


def redact_headers(text: str) -> str:
    """``name=value,...`` headers (``OTEL_EXPORTER_OTLP_HEADERS``) with every value masked: ``name=***``."""
    return ",".join(f"{entry.partition('=')[0]}={MASK}" if "=" in entry else MASK for entry in text.split(","))

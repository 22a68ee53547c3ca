"""What a DSN (and a Redis URL) may be, checked before anything connects.

A DSN holds a password, so a rejected one is described by what is wrong with it, never
repeated: a typo'd scheme, a libpq keyword/value string, a port that is not a number, a
password whose ``@``, ``/``, ``?`` or ``#`` was not percent-encoded (it then spills into the
host, the database name or the query, where asyncpg's own errors would quote it). A DSN that
passes here is one asyncpg reads the way its writer meant. Also where a DSN points, said
without credentials, and the DSN a driver connects to (an embedded one resolved): no driver
is imported here, so the CLI can name a server without loading the database stack.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from taskq_core.embedded import data_dir_for, is_embedded_dsn, resolve_dsn
from taskq_core.errors import ConfigError

DSN_FORMS = "postgresql://user:password@host:port/dbname, 'embedded' or 'embedded:PATH'"
_POSTGRES_SCHEMES = ("postgresql", "postgres")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_KEYWORD_VALUE = re.compile(r"^[A-Za-z_]+\s*=")
_IPV6_HOST = re.compile(r"^\[[^\]]+\](?::(?P<port>[^:]*))?$")
_ENCODE_HINT = "percent-encode '@', '/', '?' and '#' in a password: %40, %2F, %3F, %23"


def check_dsn(value: str) -> str:
    """``value`` stripped when it is ``embedded``, ``embedded:PATH`` or a PostgreSQL URL
    asyncpg reads as written; else ValueError saying what is wrong, without the value."""
    text = value.strip()
    if text == "embedded" or (text.startswith("embedded:") and len(text) > len("embedded:")):
        return text
    problem = _dsn_problem(text)
    if problem is not None:
        raise ValueError(f"{problem}; expected {DSN_FORMS}")
    return text


def check_redis_url(value: str) -> str:
    """``value`` stripped when it is a ``redis://``, ``rediss://`` or ``unix://`` URL with
    a numeric port; else ValueError saying what is wrong, without the value."""
    text = value.strip()
    problem = _url_problem(text, _REDIS_SCHEMES, "a Redis URL")
    if problem is not None:
        raise ValueError(f"{problem}; expected redis://[:password@]host:port/db")
    return text


def _dsn_problem(text: str) -> str | None:
    if not text:
        return "it is empty"
    if text == "embedded:":
        return "'embedded:' names no directory"
    if "://" not in text and _KEYWORD_VALUE.match(text):
        return (
            "it is a libpq keyword/value string (host=... user=...), which TaskQ does not "
            "read: write it as a URL"
        )
    return _url_problem(text, _POSTGRES_SCHEMES, "a PostgreSQL URL")


def _url_problem(text: str, schemes: tuple[str, ...], kind: str) -> str | None:
    """What keeps ``text`` from being ``kind`` with one of ``schemes``; None: nothing."""
    if not text:
        return "it is empty"
    scheme, separator, _ = text.partition("://")
    if not separator:
        return f"it is not {kind}"
    if scheme.lower() not in schemes:
        wanted = " or ".join(f"{name}://" for name in schemes)
        return f"it is not {kind}: its scheme is not {wanted}"
    try:
        parts = urlsplit(text)
    except ValueError:
        return f"it is not {kind}: an IPv6 address needs its closing ']'"
    if parts.fragment or "#" in text:
        return f"it has a '#' part, which {kind} cannot have ({_ENCODE_HINT})"
    if parts.netloc.count("@") > 1:
        return f"its user name or password holds an '@' ({_ENCODE_HINT})"
    if "@" in parts.path:
        return f"its path holds an '@' ({_ENCODE_HINT})"
    hosts = parts.netloc.rpartition("@")[2]
    problem = _hosts_problem(hosts) if hosts else None
    if problem is not None:
        return problem
    return _query_problem(parts.query)


def _hosts_problem(hosts: str) -> str | None:
    """A host list ``h1:p1,h2:p2``: every port a number from 1 to 65535."""
    for position, spec in enumerate(hosts.split(","), start=1):
        which = f"host {position}" if "," in hosts else "the host"
        ipv6 = _IPV6_HOST.match(spec) if spec.startswith("[") else None
        if spec.startswith("[") and ipv6 is None:
            return f"{which} is not a valid [IPv6]:port address"
        port = (ipv6.group("port") or "") if ipv6 is not None else spec.partition(":")[2]
        if port and not _is_port(port):
            return f"the port of {which} is not a number from 1 to 65535 ({_ENCODE_HINT})"
    return None


def _query_problem(query: str) -> str | None:
    """The query string: ``key=value`` pairs, a ``port`` parameter of numbers."""
    if not query:
        return None
    try:
        params = parse_qs(query, strict_parsing=True)
    except ValueError:
        return f"its query string is not key=value pairs joined by '&' ({_ENCODE_HINT})"
    for port in params.get("port", []):
        if not all(_is_port(part) for part in port.split(",")):
            return "its port parameter is not a number from 1 to 65535"
    return None


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 1 <= int(text) <= 65535


def describe_dsn(dsn: str) -> str:
    """Where a DSN points, without credentials: ``host:port/db`` (``h1:p1,h2:p2/db`` for a
    multi-host DSN) or the embedded directory."""
    if is_embedded_dsn(dsn):
        return f"embedded:{data_dir_for(dsn)}"  # the directory it resolves to, absolute
    parts = urlsplit(dsn)
    hosts = parts.netloc.rpartition("@")[2]  # urlsplit's port cannot read "h1:p1,h2:p2"
    if not hosts:
        hosts = re.sub(r".*host=([^&]+).*", r"\1", parts.query) if "host=" in parts.query else ""
    return f"{hosts or 'localhost'}{parts.path}"


def prepare_dsn(dsn: str) -> str:
    """Validate ``dsn`` and resolve an embedded one to a real URI (starting its server)."""
    try:
        checked = check_dsn(dsn)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return resolve_dsn(checked)

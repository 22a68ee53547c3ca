"""Values that hold a credential: which settings do, and how to speak of one without it.

Error messages reach terminals, CI logs and log shippers, so a value that fails validation
is described, never repeated, when its setting holds or may hold a credential (a DSN in any
form, a Redis URL, the admin token); other rejected values are shown with any password in
them masked and their length bounded. Valid values are shown masked (``taskq config``,
``taskq workgroup check``): the one masking rule is here.
"""

from __future__ import annotations

import re

MASK = "***"

# TaskqSettings fields whose value holds or may hold a credential: a rejected value of one of
# these is described, never shown.
CREDENTIAL_SETTINGS = frozenset(
    {"pg_dsn", "pg_dsn_direct", "pg_dsn_pooled", "redis_url", "admin_token", "admin_url"}
)
# Of those, the URLs: shown with their password masked once they are valid.
_URL_SETTINGS = frozenset({"pg_dsn", "pg_dsn_direct", "pg_dsn_pooled", "redis_url", "admin_url"})
# A variable or setting named like this holds a secret as its whole value (a token, a
# password, OTLP exporter headers that carry an API key, some other tool's DSN).
_SECRET_NAME = re.compile(
    r"token|passw(or)?d|secret|api_?key|credential|private_key|headers|dsn", re.IGNORECASE
)
# ``scheme://user:PASSWORD@``: the user information runs to the last ``@`` (a password
# holding an unescaped ``@``, ``/``, ``?`` or ``#`` is masked whole too); a multi-host URL's
# hosts share it.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:@/\s]*:)[^\s]*(?=@)", re.IGNORECASE)
# ``password=...`` in a query string or a libpq keyword/value string (quoted or not).
_PARAM_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]+)", re.I)
# A rejected value that is not a credential is shown up to this many characters.
_SHOWN_MAX = 60


def is_credential_setting(name: str) -> bool:
    """Whether setting (field) ``name`` holds or may hold a credential."""
    return name in CREDENTIAL_SETTINGS or _SECRET_NAME.search(name) is not None


def mask_credentials(text: str) -> str:
    """``text`` with the password of any URL and any ``password=`` value replaced by
    ``***`` (the rest kept: where it points stays readable)."""
    masked = _URL_PASSWORD.sub(rf"\g<head>{MASK}", text)
    return _PARAM_PASSWORD.sub(rf"\g<head>{MASK}", masked)


def scrub(message: str, source: str) -> str:
    """``message`` (another library's error about ``source``) with every password of
    ``source``, and each piece of one an unescaped ``/?#@&`` split off, masked, as well as
    what ``mask_credentials`` finds."""
    secrets: set[str] = set()
    for pattern, group in ((_URL_PASSWORD, 0), (_PARAM_PASSWORD, 2)):
        for match in pattern.finditer(source):
            secret = match.group(group)[len(match.group("head")) :] if group == 0 else match[2]
            secrets.add(secret)
            secrets.update(re.split(r"[/?#@&]", secret))
    for secret in sorted((s for s in secrets if len(s) >= 2), key=len, reverse=True):
        message = message.replace(secret, MASK)
    return mask_credentials(message)


def shown_value(name: str, value: str) -> str:
    """``value`` of setting or environment variable ``name`` as it may be printed: a
    TaskQ URL setting with its password masked, a secret-named one as ``***``, any other
    with whatever password it carries masked."""
    field = name.lower().removeprefix("taskq_")
    if field in _URL_SETTINGS:
        return mask_credentials(value)
    if is_credential_setting(field):
        return MASK
    return mask_credentials(value)


def shown_rejected(name: str, value: object) -> str | None:
    """How an error message may quote a rejected ``value`` of setting ``name``: None when
    it may hold a credential (describe it instead), else its repr, masked and bounded."""
    if is_credential_setting(name) or not isinstance(value, str | int | float):
        return None
    text = mask_credentials(value) if isinstance(value, str) else str(value)
    if len(text) > _SHOWN_MAX:
        return f"{text[:_SHOWN_MAX]!r}... ({len(text)} characters)"
    return repr(text)


def without_value(message: str, name: str, value: object) -> str:
    """A validator's ``message`` about ``value`` of setting ``name`` with the value, where
    it quotes it, replaced: by ``(the value)`` for a credential setting, else by its masked,
    bounded form (a password pasted into the wrong variable is masked all the same)."""
    if not isinstance(value, str) or not value.strip():
        return message
    text = mask_credentials(value)
    stand_in = "(the value)" if is_credential_setting(name) else text[:_SHOWN_MAX]
    if not is_credential_setting(name) and len(text) > _SHOWN_MAX:
        stand_in += "..."
    for raw in sorted({value, value.strip()}, key=len, reverse=True):
        message = message.replace(raw, stand_in)
    return message

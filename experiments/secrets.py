"""Secret values in a campaign: referenced in the file, read by the driver, never stored.

A campaign value written ``{secret: NAME}`` is the driver's environment variable NAME;
``{secret_file: PATH}`` is the content of a file on the driver (one trailing newline dropped).
The campaign (and so the store) keeps only the reference; ``SecretValues.read`` reads every
referenced value when a run starts (``bisect resume`` reads them again), ``resolve`` gives the
campaign with the values in place, in memory only, for rendering variants onto nodes, and
``redact`` takes every value read by this process out of a text before it is printed or stored.

Pure: no I/O but the driver's own environment and the secret files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from deploy.safe_words import ENV_NAME as _ENV_NAME_RULE
from experiments.urls import url_error

if TYPE_CHECKING:
    from experiments.campaign import Campaign

ENV_NAME = rf"^{_ENV_NAME_RULE.pattern}$"  # the one rule for names (deploy/safe_words.py)
_KNOWN: dict[str, str] = {}  # every secret value this process has read -> its placeholder


class SecretMissing(ValueError):
    """A referenced secret cannot be read; the message names the field and the variable."""


class SecretRef(BaseModel):
    """``{secret: NAME}`` (the driver's environment variable) or ``{secret_file: PATH}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    secret_file: Annotated[str, Field(pattern=r"^[/~]")] | None = None  # on the driver

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.secret is None) == (self.secret_file is None):
            raise ValueError("a secret is `{secret: ENV_NAME}` or `{secret_file: PATH}`")
        return self

    @property
    def key(self) -> str:
        return f"env:{self.secret}" if self.secret is not None else f"file:{self.secret_file}"

    @property
    def placeholder(self) -> str:
        """What is printed and stored where the value would be."""
        return f"<secret {self.secret or self.secret_file}>"


def _no_credentials(url: str) -> str:
    """Credentials in a URL would be stored and printed with it: refused."""
    if urlsplit(url).username is not None or urlsplit(url).password is not None:
        raise ValueError("credentials in a URL would be stored and printed in plain text: "
                         "give the endpoint's key as `api_key_env: ENV_NAME` (the driver's "
                         "environment variable holding it), sent as `Authorization: Bearer`")
    return url


def _http(url: str) -> str:
    error = url_error(url)
    if error:
        raise ValueError(error)
    return url


PlainUrl = Annotated[str, AfterValidator(_http), AfterValidator(_no_credentials)]


def check_url(url: str) -> None:
    """``ValueError`` when ``url`` is not http(s) or carries credentials
    (``http://user:pass@host``)."""
    _no_credentials(_http(url))


def api_key_ref(name: str | None) -> SecretRef | None:
    return SecretRef(secret=name) if name else None


def references(campaign: Campaign) -> Iterator[tuple[str, SecretRef]]:
    """Every secret the campaign refers to, with the field that names it."""
    for p, pool in enumerate(campaign.pools):
        if pool.api_key_env:
            yield f"pools[{p}].api_key_env", SecretRef(secret=pool.api_key_env)
        for s, service in enumerate(pool.services):
            where = f"pools[{p}].services[{s}]"
            for i, word in enumerate(service.start):
                if isinstance(word, SecretRef):
                    yield f"{where}.start[{i}]", word
            for key, value in service.env.items():
                if isinstance(value, SecretRef):
                    yield f"{where}.env.{key}", value
    for f, factor in enumerate(campaign.factors):
        for name, level in factor.levels.items():
            for key, value in (level.env if level is not None else {}).items():
                if isinstance(value, SecretRef):
                    yield f"factors[{f}].levels.{name}.env.{key}", value


def _read(ref: SecretRef, where: str, environ: Mapping[str, str]) -> str:
    if ref.secret is not None:
        value = environ.get(ref.secret)
        if not value:
            raise SecretMissing(f"{where}: the secret ${ref.secret} is not set in the driver's "
                                f"environment (export {ref.secret}=... before the run; it is "
                                "never stored)")
        return value
    assert ref.secret_file is not None  # validated: exactly one
    path = Path(ref.secret_file).expanduser()
    try:
        value = path.read_text(encoding="utf-8").removesuffix("\n")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise SecretMissing(f"{where}: cannot read the secret file {path}: {why}") from None
    if not value:
        raise SecretMissing(f"{where}: the secret file {path} is empty")
    return value


class SecretValues:
    """The values of a campaign's secrets, read once by the driver; ``values`` travel in memory
    to the pools' actors (never into the store, a file or a log)."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)

    @classmethod
    def read(cls, campaign: Campaign,
             environ: Mapping[str, str] | None = None) -> SecretValues:
        """Read every referenced secret; ``SecretMissing`` for the first that cannot be."""
        environ = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for where, ref in references(campaign):
            if ref.key not in values:
                values[ref.key] = _read(ref, where, environ)
                remember(values[ref.key], ref.placeholder)
        return cls(values)

    @staticmethod
    def read_one(ref: SecretRef, where: str) -> str:
        """One secret's value (remembered for ``redact``)."""
        value = _read(ref, where, os.environ)
        remember(value, ref.placeholder)
        return value

    def value(self, ref: SecretRef) -> str:
        try:
            return self.values[ref.key]
        except KeyError:
            raise SecretMissing(f"the secret {ref.placeholder} was not read") from None

    def word(self, word: str | SecretRef) -> str:
        return self.value(word) if isinstance(word, SecretRef) else word

    def env(self, env: Mapping[str, str | SecretRef]) -> dict[str, str]:
        return {key: self.word(value) for key, value in env.items()}

    def argv(self, argv: Sequence[str | SecretRef]) -> list[str]:
        return [self.word(word) for word in argv]

    def api_key(self, name: str | None) -> str | None:
        return self.value(SecretRef(secret=name)) if name else None


def shown(env: Mapping[str, str | SecretRef]) -> dict[str, str]:
    """An environment with placeholders for its secrets: to compare variants or print them."""
    return {k: v.placeholder if isinstance(v, SecretRef) else v for k, v in env.items()}


def shown_argv(argv: Iterable[str | SecretRef]) -> list[str]:
    return [w.placeholder if isinstance(w, SecretRef) else w for w in argv]


def remember(value: str, placeholder: str) -> None:
    """From now on ``redact`` replaces ``value`` in this process's outputs."""
    if value:
        _KNOWN[value] = placeholder


def redact(text: str, values: Mapping[str, str] | None = None) -> str:
    """``text`` with every secret value this process has read replaced by its placeholder
    (longest first, so that a secret containing another is taken out whole)."""
    known = _KNOWN if values is None else values
    for value in sorted(known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, known[value])
    return text


def redact_any(data: Any) -> Any:
    """``redact`` through strings inside lists and dicts (a JSON-like value)."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, list | tuple):
        return type(data)(redact_any(item) for item in data)
    if isinstance(data, dict):
        return {redact_any(k): redact_any(v) for k, v in data.items()}
    return data


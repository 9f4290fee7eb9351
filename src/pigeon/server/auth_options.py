"""Who a server lets in, as settings (``ServerOptions.auth``): the authenticator's kind and
keys, the operator credential, anonymous callers.

The safe defaults of ``pigeon serve`` (docs/design.md, "Trust boundary"): a request without
credentials is refused (401) unless ``--allow-anonymous``; the ``demo`` authenticator (the
``Bearer <principal>.<x>`` stand-in, which verifies nothing) serves loopback only, unless
``--insecure``; the operator routes answer only to ``--operator-token``. The messages name
the command's options: these settings are that command's.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pigeon.exceptions import ConfigurationError
from pigeon.server.access import OperatorToken
from pigeon.server.auth import Authenticator, BearerAuth

AuthKind = Literal["demo", "jwt"]


def is_loopback(host: str) -> bool:
    """Only this machine can reach ``host``: a loopback address or ``localhost``. Any
    other name is taken as reachable from outside (it may resolve to anything later)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class AuthOptions:
    """``allow_anonymous``: requests without credentials act as the one user
    ``anonymous``; None (the library's default): only with the demo stand-in."""

    auth: AuthKind = "demo"
    jwt_secret: str | None = None
    jwt_key_files: tuple[Path, ...] = ()
    jwks_file: Path | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    jwt_principal_claim: str = "sub"
    jwt_leeway: float = 30.0
    jwt_max_lifetime: float | None = None
    operator_token: str | None = None
    allow_anonymous: bool | None = None

    def __post_init__(self) -> None:
        if self.auth not in ("demo", "jwt"):
            raise ConfigurationError(
                f"auth must be 'demo' or 'jwt', not {self.auth!r}", field="auth"
            )
        sources = sum((bool(self.jwt_secret), bool(self.jwt_key_files), bool(self.jwks_file)))
        if self.auth == "demo" and sources:
            raise ConfigurationError(
                "JWT keys were given but --auth is 'demo': add --auth jwt", field="auth"
            )
        if self.auth == "jwt" and sources != 1:
            raise ConfigurationError(
                "--auth jwt needs exactly one of --jwt-secret, --jwt-key-file, --jwks-file",
                field="auth",
            )
        try:
            self.operator()  # long enough
        except ConfigurationError as exc:
            raise ConfigurationError(str(exc), field="operator_token") from None

    def __repr__(self) -> str:  # the secrets never reach a log line or a traceback
        return (
            f"AuthOptions(auth={self.auth!r}, jwt_key_files={self.jwt_key_files!r}, "
            f"jwks_file={self.jwks_file!r}, jwt_audience={self.jwt_audience!r}, "
            f"jwt_issuer={self.jwt_issuer!r}, jwt_principal_claim={self.jwt_principal_claim!r}, "
            f"jwt_leeway={self.jwt_leeway!r}, jwt_max_lifetime={self.jwt_max_lifetime!r}, "
            f"operator={'yes' if self.operator_token else 'none'}, "
            f"allow_anonymous={self.allow_anonymous!r})"
        )

    def check(self, host: str, *, insecure: bool) -> None:
        """ConfigurationError, saying why, for the demo stand-in on an address others can
        reach (unless ``insecure``)."""
        if self.auth == "demo" and not is_loopback(host) and not insecure:
            raise ConfigurationError(
                f"refusing to listen on {host}, which is not a loopback address, with "
                "--auth demo: its bearer tokens are not verified, so anyone who can reach "
                "the port could act as any user. Use --auth jwt, or --insecure to listen "
                "anyway (a private test network)",
                field="auth",
            )

    def authenticator(self) -> Authenticator:
        """The authenticator these settings name; for ``jwt`` its keys read now (a key
        file that cannot be read, a secret too short: ConfigurationError)."""
        if self.auth == "demo":
            return BearerAuth()
        from pigeon.server.jwt_auth import JwtAuth  # PyJWT and cryptography: only for jwt

        options: dict[str, Any] = {
            "audience": self.jwt_audience or None,
            "issuer": self.jwt_issuer or None,
            "principal_claim": self.jwt_principal_claim,
            "leeway": self.jwt_leeway,
            "max_lifetime": self.jwt_max_lifetime,
        }
        if self.jwt_secret:
            return JwtAuth(secret=self.jwt_secret, **options)
        return JwtAuth.from_files(key_files=self.jwt_key_files, jwks_file=self.jwks_file, **options)

    def operator(self) -> OperatorToken | None:
        return OperatorToken(self.operator_token) if self.operator_token else None

    @property
    def anonymous(self) -> bool:
        """Whether requests without credentials get in (as ``anonymous``)."""
        return self.auth == "demo" if self.allow_anonymous is None else self.allow_anonymous

"""Who ``pigeon serve`` lets in: its authentication options, checked before it listens,
and handed to each uvicorn worker process through the environment.

The safe defaults (docs/design.md, "Trust boundary"): a request without credentials is refused
(401) unless ``--allow-anonymous``; the ``demo`` authenticator (the ``Bearer
<principal>.<x>`` stand-in, which verifies nothing) serves loopback only, unless
``--insecure``; the operator routes answer only to ``--operator-token``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pigeon.exceptions import ConfigurationError
from pigeon.server.access import OperatorToken
from pigeon.server.auth import Authenticator, BearerAuth
from pigeon.server.jwt_auth import JwtAuth

AuthKind = Literal["demo", "jwt"]
_ENV = "PIGEON_SERVE_"


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
    allow_anonymous: bool = False

    def __repr__(self) -> str:  # the secrets never reach a log line or a traceback
        return f"AuthOptions(auth={self.auth!r}, allow_anonymous={self.allow_anonymous})"

    def check(self, host: str, *, insecure: bool) -> None:
        """ConfigurationError, saying why, for options that must not serve."""
        jwt_given = self.jwt_secret or self.jwt_key_files or self.jwks_file
        if self.auth == "demo" and jwt_given:
            raise ConfigurationError("JWT keys were given but --auth is 'demo': add --auth jwt")
        if self.auth == "demo" and not is_loopback(host) and not insecure:
            raise ConfigurationError(
                f"refusing to listen on {host}, which is not a loopback address, with "
                "--auth demo: its bearer tokens are not verified, so anyone who can reach "
                "the port could act as any user. Use --auth jwt, or --insecure to listen "
                "anyway (a private test network)"
            )
        self.authenticator()  # keys readable, secret long enough, options in range
        self.operator()

    def authenticator(self) -> Authenticator:
        if self.auth == "demo":
            return BearerAuth()
        options: dict[str, Any] = {
            "audience": self.jwt_audience or None,
            "issuer": self.jwt_issuer or None,
            "principal_claim": self.jwt_principal_claim,
            "leeway": self.jwt_leeway,
            "max_lifetime": self.jwt_max_lifetime,
        }
        sources = sum((bool(self.jwt_secret), bool(self.jwt_key_files), bool(self.jwks_file)))
        if sources != 1:
            raise ConfigurationError(
                "--auth jwt needs exactly one of --jwt-secret, --jwt-key-file, --jwks-file"
            )
        if self.jwt_secret:
            return JwtAuth(secret=self.jwt_secret, **options)
        return JwtAuth.from_files(key_files=self.jwt_key_files, jwks_file=self.jwks_file, **options)

    def operator(self) -> OperatorToken | None:
        return OperatorToken(self.operator_token) if self.operator_token else None

    def to_env(self) -> dict[str, str]:
        """The settings for the worker processes (``PIGEON_SERVE_*``; files absolute)."""
        return {
            _ENV + "AUTH": self.auth,
            _ENV + "JWT_SECRET": self.jwt_secret or "",
            _ENV + "JWT_KEY_FILES": os.pathsep.join(str(p.resolve()) for p in self.jwt_key_files),
            _ENV + "JWKS_FILE": str(self.jwks_file.resolve()) if self.jwks_file else "",
            _ENV + "JWT_AUDIENCE": self.jwt_audience or "",
            _ENV + "JWT_ISSUER": self.jwt_issuer or "",
            _ENV + "JWT_PRINCIPAL_CLAIM": self.jwt_principal_claim,
            _ENV + "JWT_LEEWAY": str(self.jwt_leeway),
            _ENV + "JWT_MAX_LIFETIME": ""
            if self.jwt_max_lifetime is None
            else str(self.jwt_max_lifetime),
            _ENV + "OPERATOR_TOKEN": self.operator_token or "",
            _ENV + "ALLOW_ANONYMOUS": "1" if self.allow_anonymous else "0",
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuthOptions:
        """``to_env`` read back; what is missing takes the safe default."""
        files = env.get(_ENV + "JWT_KEY_FILES", "")
        return cls(
            auth="jwt" if env.get(_ENV + "AUTH") == "jwt" else "demo",
            jwt_secret=env.get(_ENV + "JWT_SECRET") or None,
            jwt_key_files=tuple(Path(p) for p in files.split(os.pathsep) if p),
            jwks_file=Path(env[_ENV + "JWKS_FILE"]) if env.get(_ENV + "JWKS_FILE") else None,
            jwt_audience=env.get(_ENV + "JWT_AUDIENCE") or None,
            jwt_issuer=env.get(_ENV + "JWT_ISSUER") or None,
            jwt_principal_claim=env.get(_ENV + "JWT_PRINCIPAL_CLAIM") or "sub",
            jwt_leeway=float(env.get(_ENV + "JWT_LEEWAY") or 30.0),
            jwt_max_lifetime=float(lifetime)
            if (lifetime := env.get(_ENV + "JWT_MAX_LIFETIME"))
            else None,
            operator_token=env.get(_ENV + "OPERATOR_TOKEN") or None,
            allow_anonymous=env.get(_ENV + "ALLOW_ANONYMOUS") == "1",
        )

    def app_options(self) -> dict[str, Any]:
        """``create_notes_app``'s access arguments."""
        return {
            "authenticate": self.authenticator(),
            "operator": self.operator(),
            "allow_anonymous": self.allow_anonymous,
        }

"""``JwtAuth``: the real authenticator, verifying signed JWTs with PyJWT.

    JwtAuth(secret=os.environ["PIGEON_JWT_SECRET"], audience="pigeon")        # HS256
    JwtAuth.from_files(key_files=["issuer.pem"], issuer="https://id.example")  # RS256/ES256
    JwtAuth.from_files(jwks_file="jwks.json", audience="pigeon")              # a key set

What is checked: the signature, with the algorithms the key allows and no other (never
``none``, never HS256 with a public key: the algorithm comes from the key, not from the
token); ``exp`` (required by default: a token that never expires is refused), ``nbf``,
``aud`` and ``iss`` when configured (a token carrying an ``aud`` is refused when no
audience is configured), each with a bounded leeway for clock skew. The numeric dates
(``exp``, ``nbf``, ``iat``) must be JSON numbers from 0 to the end of year 9999: PyJWT
took ``"exp": "99999999999"`` (a string) and ``1e308``. ``max_lifetime`` (seconds, off by
default) refuses a token that would live longer: ``exp`` more than that after ``iat`` or
after now. The principal is the claim ``principal_claim`` (default ``sub``), a non-empty
string taken exactly as the token says it: no case folding, no normalisation.

A JWKS file is read again when it changes (checked at most once a second), so keys rotate
without a restart: publish the new key beside the old one, switch the issuer, retire the
old key later. A file that cannot be read or parsed meanwhile keeps the keys in force.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from starlette.requests import HTTPConnection

from pigeon.checks import is_number
from pigeon.exceptions import AuthorizationRequired, ConfigurationError
from pigeon.server.auth import bearer_token

log = logging.getLogger(__name__)

DEFAULT_LEEWAY = 30.0  # seconds of clock skew forgiven on exp / nbf
MAX_LEEWAY = 300.0  # more and an expired token lives on for minutes
MAX_NUMERIC_DATE = 253_402_300_799  # 9999-12-31T23:59:59Z: later is no date but a forever
NUMERIC_DATES = ("exp", "nbf", "iat")
MIN_SECRET_BYTES = 32  # RFC 7518 3.2: an HS256 key at least as long as the hash
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_RELOAD_EVERY = 1.0  # seconds between looks at the JWKS file's modification time


@dataclass(frozen=True, slots=True)
class _Key:
    key: Any  # what PyJWT verifies with: bytes (HMAC) or a cryptography public key
    algorithms: tuple[str, ...]
    kid: str | None = None


def _public_key(pem: bytes, source: str) -> _Key:
    try:
        key = load_pem_public_key(pem)
    except ValueError as exc:
        raise ConfigurationError(f"{source} is not a PEM public key: {exc}") from exc
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ConfigurationError(f"{source}: an RSA key of {key.key_size} bits, at least 2048")
        return _Key(key, ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"))
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _EC_ALGORITHMS:
        return _Key(key, (_EC_ALGORITHMS[key.curve.name],))
    raise ConfigurationError(f"{source}: an RSA or P-256/384/521 EC public key is needed")


def _jwks_keys(data: Any, source: str) -> list[_Key]:
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ConfigurationError(f'{source} is not a JWKS document ({{"keys": [...]}})')
    keys = []
    for entry in data["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue  # an encryption key, or junk: never a signing key
        try:
            jwk = jwt.PyJWK(entry)
        except jwt.PyJWTError as exc:
            log.warning("%s: a key skipped (kid %r): %s", source, entry.get("kid"), exc)
            continue
        if jwk.algorithm_name == "none":
            continue
        keys.append(_Key(jwk.key, (jwk.algorithm_name,), jwk.key_id))
    if not keys:
        raise ConfigurationError(f"{source} holds no usable signing key")
    return keys


class JwtAuth:
    """Verify ``Authorization: Bearer <JWT>``; see the module docstring for what counts."""

    def __init__(
        self,
        *,
        secret: str | bytes | None = None,
        public_keys: Sequence[bytes] = (),
        jwks: Mapping[str, Any] | None = None,
        jwks_file: str | Path | None = None,
        audience: str | Sequence[str] | None = None,
        issuer: str | None = None,
        principal_claim: str = "sub",
        leeway: float = DEFAULT_LEEWAY,
        require: Sequence[str] = ("exp",),
        hmac_algorithms: Sequence[str] = ("HS256",),
        max_lifetime: float | None = None,
    ) -> None:
        sources = sum(x is not None for x in (secret, jwks, jwks_file)) + bool(public_keys)
        if sources != 1:
            raise ConfigurationError(
                "JwtAuth needs exactly one of: a secret, public keys, a JWKS, a JWKS file"
            )
        if not 0 <= leeway <= MAX_LEEWAY:  # nan fails both
            raise ConfigurationError(f"leeway={leeway} must be 0 to {MAX_LEEWAY:g} seconds")
        if not principal_claim:
            raise ConfigurationError("principal_claim must name a claim")
        if max_lifetime is not None and not 0 < max_lifetime <= MAX_NUMERIC_DATE:
            raise ConfigurationError(f"max_lifetime={max_lifetime} must be a positive number")
        self.max_lifetime = max_lifetime
        if audience is not None and not isinstance(audience, str):
            audience = list(audience)
        self.audience = audience
        self.issuer = issuer
        self.principal_claim = principal_claim
        self.leeway = float(leeway)
        self.require = [*require, principal_claim]
        self._lock = threading.Lock()
        self._jwks_file = Path(jwks_file) if jwks_file is not None else None
        self._checked_at = 0.0
        self._mtime = 0.0
        self._keys: list[_Key] = []
        if secret is not None:
            raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
            if len(raw) < MIN_SECRET_BYTES:
                raise ConfigurationError(
                    f"the JWT secret is {len(raw)} bytes, at least {MIN_SECRET_BYTES} needed"
                )
            unknown = set(hmac_algorithms) - set(HMAC_ALGORITHMS)
            if unknown or not hmac_algorithms:
                raise ConfigurationError(f"hmac_algorithms must be some of {HMAC_ALGORITHMS}")
            self._keys = [_Key(raw, tuple(hmac_algorithms))]
        elif public_keys:
            self._keys = [
                _public_key(pem, f"public key {n}") for n, pem in enumerate(public_keys, 1)
            ]
        elif jwks is not None:
            self._keys = _jwks_keys(dict(jwks), "the JWKS")
        else:
            self._load_jwks_file()

    @classmethod
    def from_files(
        cls,
        *,
        key_files: Sequence[str | Path] = (),
        jwks_file: str | Path | None = None,
        **options: Any,
    ) -> JwtAuth:
        """Public keys from PEM files, or a JWKS file (read again when it changes)."""
        if key_files and jwks_file is not None:
            raise ConfigurationError("give PEM key files or a JWKS file, not both")
        if jwks_file is not None:
            return cls(jwks_file=jwks_file, **options)
        pems = []
        for name in key_files:
            try:
                pems.append(Path(name).read_bytes())
            except OSError as exc:
                raise ConfigurationError(f"cannot read the key file {name}: {exc}") from exc
        return cls(public_keys=pems, **options)

    def __repr__(self) -> str:  # never the secret
        keys, audience, issuer = len(self._keys), self.audience, self.issuer
        return f"JwtAuth(keys={keys}, audience={audience!r}, issuer={issuer!r})"

    def _load_jwks_file(self) -> None:
        assert self._jwks_file is not None
        try:
            mtime = os.stat(self._jwks_file).st_mtime
            data = json.loads(self._jwks_file.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the JWKS file {self._jwks_file}: {exc}") from exc
        self._keys = _jwks_keys(data, str(self._jwks_file))
        self._mtime = mtime

    def _current_keys(self) -> list[_Key]:
        if self._jwks_file is None:
            return self._keys
        now = time.monotonic()
        if now - self._checked_at >= _RELOAD_EVERY:
            with self._lock:
                if now - self._checked_at >= _RELOAD_EVERY:
                    self._checked_at = now
                    self._reload_if_changed()
        return self._keys

    def _reload_if_changed(self) -> None:
        assert self._jwks_file is not None
        try:
            if os.stat(self._jwks_file).st_mtime == self._mtime:
                return
            self._load_jwks_file()
            log.info("JWKS file %s read again: %d keys", self._jwks_file, len(self._keys))
        except (OSError, ConfigurationError) as exc:
            log.warning("JWKS file %s not read again, keys kept: %s", self._jwks_file, exc)

    def _candidates(self, token: str) -> list[_Key]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _refused(f"the bearer token is not a JWT: {exc}") from exc
        keys = self._current_keys()
        kid = header.get("kid")
        if kid is not None and any(k.kid is not None for k in keys):
            named = [k for k in keys if k.kid == kid]
            if not named:
                raise _refused("the token's key id (kid) names no key this server trusts")
            return named
        return keys

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, or ``AuthorizationRequired`` (401) saying what is wrong."""
        error: jwt.PyJWTError | None = None
        for key in self._candidates(token):
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key.key,
                    algorithms=list(key.algorithms),
                    audience=self.audience,
                    issuer=self.issuer,
                    leeway=self.leeway,
                    options={"require": self.require},
                )
                self._check_dates(claims)
                return claims
            except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError) as exc:
                error = exc  # another of the keys may have signed it
            except jwt.PyJWTError as exc:  # signed by this key, but not acceptable
                raise _refused(_reason(exc)) from exc
        assert error is not None
        raise _refused(_reason(error)) from error

    def _check_dates(self, claims: dict[str, Any]) -> None:
        """The numeric dates are numbers within the calendar, and the token lives no
        longer than ``max_lifetime``: else ``AuthorizationRequired`` (401)."""
        for name in NUMERIC_DATES:
            value = claims.get(name)
            if name in claims and (
                not is_number(value) or not 0 <= value <= MAX_NUMERIC_DATE  # nan fails too
            ):
                raise _refused(
                    f"the token's {name!r} claim is not a number of seconds from 1970 to 9999"
                )
        if self.max_lifetime is None:
            return
        exp = claims.get("exp")
        if exp is None:
            raise _refused("the token has no 'exp' claim, and its lifetime is bounded")
        # From its issue or from now, whichever is earlier; a clock behind the issuer's
        # is forgiven the leeway, as exp and nbf are.
        now = time.time()
        since = min(now, claims["iat"]) if "iat" in claims else now
        if exp - since > self.max_lifetime + self.leeway:
            raise _refused(f"the token lives longer than {self.max_lifetime:g} seconds")

    def __call__(self, conn: HTTPConnection) -> str | None:
        token = bearer_token(conn)
        if token is None:
            return None
        claims = self.verify(token)
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            # A number or a list is refused, not stringified: 7 and "7" would be one user.
            raise _refused(f"the token's {self.principal_claim!r} claim is not a non-empty string")
        return principal


def _refused(detail: str) -> AuthorizationRequired:
    return AuthorizationRequired(detail, status=401)


def _reason(exc: jwt.PyJWTError) -> str:
    """What is wrong with the token, in words that hold no part of it."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "the token has expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "the token is not valid yet (nbf)"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "the token is not for this audience (aud)"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "the token is not from the expected issuer (iss)"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the token has no {exc.claim!r} claim"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return "the token's algorithm is not one this server's keys allow"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "the token's signature does not verify"
    return f"the token is invalid: {exc}"

"""Encryption at rest: AES-GCM envelopes for the text columns that hold what users wrote.

A sealed value is one string in the column it replaces::

    pg1:<key id>:<base64(nonce | ciphertext | tag)>

or, where the column is the edge queue's own (`seal_binary`), the same envelope as bytes,
without the base64 (a BLOB: a third smaller, and neither side pays for the encoding)::

    b"pg1:" <key id> b":" nonce | ciphertext | tag

Why an envelope in the same column and not extra columns: every query, index and
migration stays as it was (the sealed columns are never searched or compared in SQL),
one statement still reads or writes a row, and the key id travels with the ciphertext,
so rows sealed under different keys live side by side while a rotation runs.

- Nonces are 96 random bits (``os.urandom``) per seal: a key may seal ~2**32 values
  before the chance of a repeated nonce becomes a concern; rotate long before that.
  They are drawn 256 at a time (`_Nonces`): one system call per 256 seals.
- Associated data binds a ciphertext to its table, column and row (``seal(value, *ad)``):
  a ciphertext copied into another row, or another column, fails to open.
- Without a keyring (`PLAIN`) values pass through as they are. A clear value that happens
  to start like an envelope (free text, e.g. an error message) is stored behind an escape
  mark (``pg0:``), so it can never be taken for a ciphertext; JSON never starts that way.
- Opening a value sealed under a key the keyring lacks raises `KeyMissing` naming the key
  id; a value that fails authentication (tampered, truncated, moved) raises
  `CiphertextInvalid`. Never garbage, never the clear text of another row.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pigeon.exceptions import CiphertextInvalid, ConfigurationError, KeyMissing

SEALED = "pg1:"  # an AES-GCM envelope
SEALED_BYTES = SEALED.encode("ascii")  # the same, binary
ESCAPED = "pg0:"  # a clear value that began like an envelope
_MARKS = (SEALED, ESCAPED)
NONCE_BYTES = 12
KEY_BYTES = (16, 24, 32)  # AES-128/192/256; `generate_key` makes 256-bit keys
KID = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # never ':' (the envelope's separator)
ENV_KEYS = "PIGEON_KEYS"
ENV_KEYS_FILE = "PIGEON_KEYS_FILE"
__all__ = ["PLAIN", "Cipher", "CiphertextInvalid", "KeyMissing", "Keyring", "cipher_for"]


def _ad(parts: tuple[str, ...]) -> bytes:
    # Length-prefixed, so no two different tuples give the same bytes ("a|b", "c" vs
    # "a", "b|c"), whatever characters principals or ids contain. A table and a column
    # come from a handful of constants: their prefix is kept in a dict, read twice per
    # delivered operation; a longer head (with a principal) goes to the bounded cache.
    row = parts[-1]
    head = parts[:-1]
    prefix = _COLUMNS.get(head)
    if prefix is None:
        prefix = _prefix(head)
        if len(head) == 2:
            _COLUMNS[head] = prefix
    return prefix + f"{len(row)}:{row}".encode("utf-8", "surrogatepass")


_COLUMNS: dict[tuple[str, ...], bytes] = {}


@functools.lru_cache(maxsize=256)
def _prefix(parts: tuple[str, ...]) -> bytes:
    return "".join([f"{len(p)}:{p}" for p in parts]).encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Keyring:
    """AES-GCM keys by id; the first is the current one (every new seal uses it), the
    others only open what they sealed before."""

    keys: tuple[tuple[str, bytes], ...]
    _aead: dict[str, AESGCM] = field(init=False, repr=False, compare=False)
    # The current key: its id, its AES-GCM and the binary envelope's head (b"pg1:<id>:").
    _sealer: tuple[str, AESGCM, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigurationError("a keyring needs at least one key")
        aead: dict[str, AESGCM] = {}
        for kid, key in self.keys:
            if not KID.fullmatch(kid):
                raise ConfigurationError(
                    f"key id {kid!r}: use 1-64 characters of A-Z a-z 0-9 _ . -"
                )
            if len(key) not in KEY_BYTES:
                raise ConfigurationError(
                    f"key {kid!r} is {len(key)} bytes; AES-GCM takes 16, 24 or 32"
                )
            if kid in aead:
                raise ConfigurationError(f"key id {kid!r} is given twice")
            aead[kid] = AESGCM(key)
        object.__setattr__(self, "_aead", aead)
        kid = self.keys[0][0]
        head = b"".join((SEALED_BYTES, kid.encode("ascii"), b":"))
        object.__setattr__(self, "_sealer", (kid, aead[kid], head))

    def __repr__(self) -> str:  # never the key bytes, in a log or a traceback
        return f"Keyring(current={self.current!r}, ids={list(self.ids)!r})"

    @property
    def current(self) -> str:
        return self.keys[0][0]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(kid for kid, _ in self.keys)

    @classmethod
    def parse(cls, text: str, origin: str = ENV_KEYS) -> Keyring:
        """``kid:base64key`` entries separated by commas or new lines, newest first;
        ``#`` starts a comment line. An entry ``current=<kid>`` names the current key
        explicitly (otherwise the first)."""
        keys: list[tuple[str, bytes]] = []
        current: str | None = None
        for raw in re.split(r"[,\n]", text):
            entry = raw.strip()
            if not entry or entry.startswith("#"):
                continue
            if entry.startswith("current="):
                current = entry.removeprefix("current=").strip()
                continue
            kid, sep, b64 = entry.partition(":")
            if not sep:
                raise ConfigurationError(f"{origin}: an entry is not 'kid:base64key'")
            try:
                key = base64.b64decode(b64.strip(), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ConfigurationError(f"{origin}: key {kid.strip()!r} is not base64") from exc
            keys.append((kid.strip(), key))
        if not keys:
            raise ConfigurationError(f"{origin}: no keys")
        if current is not None:
            found = [k for k in keys if k[0] == current]
            if not found:
                raise ConfigurationError(f"{origin}: current={current!r} names no key given")
            keys = found + [k for k in keys if k[0] != current]
        try:
            return cls(tuple(keys))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{origin}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """Keys from a file only its owner can read (mode 0600 or 0400): one readable by
        the group or the world is refused, as ssh does with a private key."""
        name = os.fspath(path)
        try:
            mode = os.stat(name).st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigurationError(
                    f"key file {name} is accessible to group or others (mode "
                    f"{stat.S_IMODE(mode):04o}); run: chmod 600 {name}"
                )
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read key file {name}: {exc.strerror}") from exc
        return cls.parse(text, origin=f"key file {name}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """``PIGEON_KEYS`` (the keys themselves) or ``PIGEON_KEYS_FILE`` (a key file);
        None when neither is set. Both at once is refused: which one wins would be a
        guess."""
        env = os.environ if environ is None else environ
        text, path = env.get(ENV_KEYS), env.get(ENV_KEYS_FILE)
        if text and path:
            raise ConfigurationError(f"set {ENV_KEYS} or {ENV_KEYS_FILE}, not both")
        if text:
            return cls.parse(text)
        if path:
            return cls.from_file(path)
        return None


def generate_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def new_kid(now: float | None = None) -> str:
    """A key id that sorts by creation time and says when the key was made."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"k{stamp}-{os.urandom(2).hex()}"


def key_entry(kid: str, key: bytes) -> str:
    return f"{kid}:{base64.b64encode(key).decode('ascii')}"


def kid_of(value: str) -> str | None:
    """The key id of a sealed value; None for a clear one."""
    if not value.startswith(SEALED):
        return None
    return value[len(SEALED) :].partition(":")[0]


class Cipher:
    """Seals and opens column values: with a keyring, AES-GCM under the current key;
    without one (`PLAIN`), values pass through (an envelope-like clear value escaped)."""

    __slots__ = ("keyring",)

    def __init__(self, keyring: Keyring | None = None) -> None:
        self.keyring = keyring

    def __repr__(self) -> str:
        return f"Cipher({self.keyring!r})"

    @property
    def enabled(self) -> bool:
        return self.keyring is not None

    @overload
    def seal(self, value: str, *ad: str) -> str: ...
    @overload
    def seal(self, value: None, *ad: str) -> None: ...
    def seal(self, value: str | None, *ad: str) -> str | None:
        """``value`` as stored; ``ad``: table, column and the row's key, which it must
        come back with to open."""
        if value is None:
            return None
        ring = self.keyring
        if ring is None:
            # The only cost without a key: one prefix test (JSON never matches).
            return ESCAPED + value if value.startswith(_MARKS) else value
        kid, aead, _ = ring._sealer
        blob = _encrypted(aead, value, ad)
        return f"{SEALED}{kid}:{binascii.b2a_base64(blob, newline=False).decode('ascii')}"

    @overload
    def seal_binary(self, value: str, *ad: str) -> str | bytes: ...
    @overload
    def seal_binary(self, value: None, *ad: str) -> None: ...
    def seal_binary(self, value: str | None, *ad: str) -> str | bytes | None:
        """``seal``, the envelope as bytes with a key (a column that holds BLOBs: no
        base64 either way); without one, the text ``seal`` stores."""
        ring = self.keyring
        if ring is None or value is None:
            return self.seal(value, *ad)
        _, aead, head = ring._sealer
        return head + _encrypted(aead, value, ad)

    @overload
    def open(self, value: str | bytes, *ad: str) -> str: ...
    @overload
    def open(self, value: None, *ad: str) -> None: ...
    def open(self, value: str | bytes | None, *ad: str) -> str | None:
        """The clear text of a stored value (a clear one, written before a key was set,
        as it is). KeyMissing / CiphertextInvalid rather than anything else."""
        if isinstance(value, bytes):
            return self._open_binary(value, ad)
        if value is None or not value.startswith(_MARKS):
            return value
        if value.startswith(ESCAPED):
            return value[len(ESCAPED) :]
        kid, sep, b64 = value[len(SEALED) :].partition(":")
        aead = self._key(kid, ad)
        try:
            # strict_mode: the C check of the alphabet and padding, where
            # b64decode(validate=True) runs a regular expression over the whole value.
            blob = binascii.a2b_base64(b64, strict_mode=True) if sep else b""
        except binascii.Error as exc:
            raise _invalid(kid, ad) from exc
        return _decrypted(kid, aead, blob, ad)

    def _open_binary(self, value: bytes, ad: tuple[str, ...]) -> str:
        colon = value.find(b":", len(SEALED_BYTES))
        if not value.startswith(SEALED_BYTES) or colon < 0:
            # No text is ever stored as bytes: this one was not written by seal_binary.
            raise CiphertextInvalid(f"a binary value in {'.'.join(ad[:2])} is no envelope")
        kid = value[len(SEALED_BYTES) : colon].decode("latin-1")
        return _decrypted(kid, self._key(kid, ad), value[colon + 1 :], ad)

    def _key(self, kid: str, ad: tuple[str, ...]) -> AESGCM:
        """The key ``kid`` names; KeyMissing when the keyring lacks it (or there is none)."""
        aead = None if self.keyring is None else self.keyring._aead.get(kid)
        if aead is None:
            raise KeyMissing(kid, ".".join(ad[:2]))
        return aead


class _Nonces:
    """Nonces from ``os.urandom``, 256 drawn by one system call (it also lets go of the
    interpreter lock each time): 0.2 us a seal where a call each cost 0.4. ``list.pop``
    hands each one out once, whichever threads ask at once; a forked child drops what it
    inherited, so it never seals with a nonce its parent uses too."""

    def __init__(self) -> None:
        self._left: list[bytes] = []

    def take(self) -> bytes:
        try:
            return self._left.pop()
        except IndexError:
            raw = os.urandom(NONCE_BYTES * 256)
            fresh = [raw[at : at + NONCE_BYTES] for at in range(0, len(raw), NONCE_BYTES)]
            nonce = fresh.pop()
            self._left.extend(fresh)
            return nonce

    def clear(self) -> None:
        self._left = []


_nonces = _Nonces()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_nonces.clear)


def _encrypted(aead: AESGCM, value: str, ad: tuple[str, ...]) -> bytes:
    """nonce | ciphertext | tag of ``value`` bound to ``ad``: what both forms of the
    envelope carry after the key id."""
    nonce = _nonces.take()
    return nonce + aead.encrypt(nonce, value.encode("utf-8", "surrogatepass"), _ad(ad))


def _decrypted(kid: str, aead: AESGCM, blob: bytes, ad: tuple[str, ...]) -> str:
    """The clear text of nonce | ciphertext | tag, whichever envelope carried it."""
    try:
        if len(blob) < NONCE_BYTES + 16:
            raise ValueError("too short")
        clear = aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], _ad(ad))
    except (InvalidTag, ValueError) as exc:
        raise _invalid(kid, ad) from exc
    return clear.decode("utf-8", "surrogatepass")


def _invalid(kid: str, ad: tuple[str, ...]) -> CiphertextInvalid:
    return CiphertextInvalid(
        f"a value sealed with key {kid!r} ({'.'.join(ad[:2])}) failed "
        "authentication: tampered, truncated, or moved from another row"
    )


PLAIN = Cipher(None)


def cipher_for(keyring: Keyring | None) -> Cipher:
    return PLAIN if keyring is None else Cipher(keyring)

"""The AES-GCM envelope (pigeon.storage.crypto): round trips, tamper detection, wrong or
missing keys, the key file's permissions and the keyring's configuration."""

from __future__ import annotations

import base64
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.storage.crypto import (
    ESCAPED,
    NONCE_BYTES,
    PLAIN,
    SEALED,
    Cipher,
    CiphertextInvalid,
    KeyMissing,
    Keyring,
    _ad,
    generate_key,
    key_entry,
    kid_of,
)

K1, K2 = generate_key(), generate_key()
OLD = Keyring((("old", K1),))
NEW = Keyring((("new", K2), ("old", K1)))  # rotated: new current, old still opens

texts = st.text()  # any str, lone surrogates included (SQLite can hold them)
ads = st.lists(st.text(max_size=20), min_size=1, max_size=4).map(tuple)


@given(texts, ads)
def test_round_trip_under_a_key(value: str, ad: tuple[str, ...]) -> None:
    cipher = Cipher(NEW)
    sealed = cipher.seal(value, *ad)
    assert sealed.startswith(f"{SEALED}new:")
    assert cipher.open(sealed, *ad) == value


@given(texts, ads)
def test_without_a_key_values_pass_through_and_come_back(value: str, ad: tuple[str, ...]) -> None:
    stored = PLAIN.seal(value, *ad)
    assert stored == value or (value.startswith((SEALED, ESCAPED)) and stored == ESCAPED + value)
    assert PLAIN.open(stored, *ad) == value
    # ... and a keyring configured later reads what was stored in clear.
    assert Cipher(NEW).open(stored, *ad) == value


@given(texts, ads)
def test_a_clear_value_that_looks_like_an_envelope_is_never_taken_for_one(
    value: str, ad: tuple[str, ...]
) -> None:
    tricky = SEALED + "new:" + value
    assert Cipher(NEW).open(Cipher(NEW).seal(tricky, *ad), *ad) == tricky
    assert PLAIN.open(PLAIN.seal(tricky, *ad), *ad) == tricky


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=64), ads, st.data())
def test_any_change_to_the_ciphertext_is_detected(
    clear: bytes, ad: tuple[str, ...], data: st.DataObject
) -> None:
    cipher = Cipher(NEW)
    sealed = cipher.seal(clear.hex(), *ad)
    head, blob = sealed.rsplit(":", 1)
    raw = bytearray(base64.b64decode(blob))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    tampered = f"{head}:{base64.b64encode(bytes(raw)).decode()}"
    with pytest.raises(CiphertextInvalid, match="'new'"):
        cipher.open(tampered, *ad)


@given(texts, ads, ads)
def test_a_ciphertext_moved_to_another_row_does_not_open(
    value: str, ad: tuple[str, ...], other: tuple[str, ...]
) -> None:
    if ad == other:
        return
    sealed = Cipher(NEW).seal(value, *ad)
    with pytest.raises(CiphertextInvalid):
        Cipher(NEW).open(sealed, *other)


@given(ads)
def test_associated_data_is_each_part_length_prefixed_cached_or_not(ad: tuple[str, ...]) -> None:
    spelled = "".join(f"{len(part)}:{part}" for part in ad).encode("utf-8", "surrogatepass")
    assert _ad(ad) == spelled
    assert _ad(ad) == spelled  # the second time from the prefix kept for its head


def test_new_seals_use_the_current_key_of_their_own_keyring() -> None:
    assert kid_of(Cipher(OLD).seal("x", "t", "c", "r")) == "old"
    assert kid_of(Cipher(NEW).seal("x", "t", "c", "r")) == "new"
    assert (
        kid_of(
            Cipher(Keyring.parse(f"{key_entry('a', K1)},{key_entry('b', K2)},current=b")).seal(
                "x", "t", "c", "r"
            )
        )
        == "b"
    )


def test_associated_data_parts_are_not_ambiguous() -> None:
    sealed = Cipher(NEW).seal("x", "notes", "data", "a:b", "c")
    with pytest.raises(CiphertextInvalid):
        Cipher(NEW).open(sealed, "notes", "data", "a", "b:c")


@given(texts, ads)
def test_old_rows_stay_readable_after_rotation_new_rows_use_the_new_key(
    value: str, ad: tuple[str, ...]
) -> None:
    before = Cipher(OLD).seal(value, *ad)
    assert kid_of(before) == "old"
    assert Cipher(NEW).open(before, *ad) == value
    assert kid_of(Cipher(NEW).seal(value, *ad)) == "new"


@given(texts, ads)
def test_a_missing_key_is_a_typed_error_naming_the_key_id(value: str, ad: tuple[str, ...]) -> None:
    sealed = Cipher(NEW).seal(value, *ad)
    for reader in (Cipher(OLD), PLAIN):
        with pytest.raises(KeyMissing, match="'new'") as caught:
            reader.open(sealed, *ad)
        assert caught.value.kid == "new"


def test_the_same_key_id_with_other_bytes_fails_authentication_not_garbage() -> None:
    sealed = Cipher(Keyring((("k", K1),))).seal("secret", "t", "c")
    with pytest.raises(CiphertextInvalid):
        Cipher(Keyring((("k", K2),))).open(sealed, "t", "c")


def test_nonces_are_fresh() -> None:
    cipher = Cipher(NEW)
    assert len({cipher.seal("same", "t", "c") for _ in range(200)}) == 200


def _nonce(envelope: bytes) -> bytes:
    return envelope[envelope.index(b":", len(SEALED)) + 1 :][:NONCE_BYTES]


def test_threads_sealing_at_once_never_share_a_nonce() -> None:
    # Past many refills of the pool, from threads that start together and switch between
    # any two lines.
    cipher, per_thread, threads = Cipher(NEW), 4000, 4
    start = threading.Barrier(threads)

    def seal(_: int) -> list[bytes]:
        start.wait()
        return [_nonce(cipher.seal_binary("x", "t", "c")) for _ in range(per_thread)]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(threads) as pool:
            nonces = [nonce for batch in pool.map(seal, range(threads)) for nonce in batch]
    finally:
        sys.setswitchinterval(interval)
    assert len(nonces) == len(set(nonces)) == per_thread * threads


def test_a_forked_child_never_seals_with_its_parents_nonces() -> None:
    cipher = Cipher(NEW)
    cipher.seal_binary("x", "t", "c")  # the pool holds unused nonces now, which a child inherits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(write, _nonce(cipher.seal_binary("x", "t", "c")))
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 100)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == NONCE_BYTES
    assert child != _nonce(cipher.seal_binary("x", "t", "c"))


def test_truncated_or_malformed_envelopes_are_refused() -> None:
    cipher = Cipher(NEW)
    for bad in (f"{SEALED}new:", f"{SEALED}new:!!!", f"{SEALED}new", f"{SEALED}new:AAAA"):
        with pytest.raises(CiphertextInvalid):
            cipher.open(bad, "t", "c")


def test_none_stays_none() -> None:
    assert Cipher(NEW).seal(None, "t") is None
    assert Cipher(NEW).open(None, "t") is None


def test_keyring_parse_order_and_explicit_current() -> None:
    text = f"{key_entry('a', K1)},{key_entry('b', K2)}"
    assert Keyring.parse(text).current == "a"
    assert Keyring.parse(text + ",current=b").current == "b"
    assert Keyring.parse(f"# comment\n{key_entry('a', K1)}\n\n").ids == ("a",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no keys"),
        ("a", "not 'kid:base64key'"),
        ("a:not base64!", "not base64"),
        (f"a:{base64.b64encode(b'short').decode()}", "5 bytes"),
        (f"a:b:{base64.b64encode(K1).decode()}", "not base64"),
        (f"{key_entry('a', K1)},{key_entry('a', K2)}", "twice"),
        (f"{key_entry('a b', K1)}", "key id"),
        (f"{key_entry('a', K1)},current=z", "names no key"),
    ],
    # The keys are random: ids of their own keep the test names stable across processes.
    ids=["empty", "no-kid", "bad-base64", "short", "two-colons", "twice", "bad-kid", "no-current"],
)
def test_bad_keyrings_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Keyring.parse(text)


def test_the_keyring_never_shows_its_keys() -> None:
    shown = repr(NEW) + repr(Cipher(NEW)) + str(NEW)
    assert base64.b64encode(K1).decode() not in shown
    assert base64.b64encode(K2).decode() not in shown


def test_keys_from_the_environment(tmp_path: Path) -> None:
    assert Keyring.from_env({}) is None
    assert Keyring.from_env({"PIGEON_KEYS": key_entry("e", K1)}).ids == ("e",)  # type: ignore[union-attr]
    path = tmp_path / "keys"
    path.write_text(key_entry("f", K2) + "\n")
    path.chmod(0o600)
    ring = Keyring.from_env({"PIGEON_KEYS_FILE": str(path)})
    assert ring is not None and ring.ids == ("f",)
    with pytest.raises(ConfigurationError, match="not both"):
        Keyring.from_env({"PIGEON_KEYS": key_entry("e", K1), "PIGEON_KEYS_FILE": str(path)})


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o610])
def test_a_key_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "keys"
    path.write_text(key_entry("f", K1))
    os.chmod(path, mode)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        Keyring.from_file(path)
    os.chmod(path, 0o600)
    assert Keyring.from_file(path).ids == ("f",)
    os.chmod(path, 0o400)
    assert Keyring.from_file(path).ids == ("f",)


def test_a_missing_key_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read key file"):
        Keyring.from_file(tmp_path / "nope")


# -- the binary envelope (Cipher.seal_binary: the edge queue's BLOB columns) ----------------


@given(texts, ads)
def test_the_binary_envelope_round_trips_and_holds_no_clear_text(
    value: str, ad: tuple[str, ...]
) -> None:
    sealed = Cipher(NEW).seal_binary(value, *ad)
    assert isinstance(sealed, bytes) and sealed.startswith(b"pg1:new:")
    assert Cipher(NEW).open(sealed, *ad) == value
    assert Cipher(NEW).seal_binary(value, *ad) != sealed  # a fresh nonce each time
    # Without a key it stores what seal stores: the text, escaped if it looks sealed.
    assert PLAIN.seal_binary(value, *ad) == PLAIN.seal(value, *ad)


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=64), ads, st.data())
def test_any_change_to_a_binary_envelope_is_detected(
    clear: bytes, ad: tuple[str, ...], data: st.DataObject
) -> None:
    cipher = Cipher(NEW)
    sealed = bytearray(cipher.seal_binary(clear.hex(), *ad))
    i = data.draw(st.integers(len(b"pg1:new:"), len(sealed) - 1))  # nonce, ciphertext, tag
    sealed[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CiphertextInvalid, match="'new'"):
        cipher.open(bytes(sealed), *ad)
    cut = data.draw(st.integers(0, len(sealed) - 1))
    with pytest.raises((CiphertextInvalid, KeyMissing)):
        cipher.open(cipher.seal_binary(clear.hex(), *ad)[:cut], *ad)


@given(texts, ads, ads)
def test_a_binary_envelope_moved_to_another_row_does_not_open(
    value: str, ad: tuple[str, ...], other: tuple[str, ...]
) -> None:
    assume(ad != other)
    with pytest.raises(CiphertextInvalid):
        Cipher(NEW).open(Cipher(NEW).seal_binary(value, *ad), *other)


@given(texts, ads)
def test_a_binary_envelope_without_its_key_names_the_key(value: str, ad: tuple[str, ...]) -> None:
    sealed = Cipher(NEW).seal_binary(value, *ad)
    for reader in (Cipher(OLD), PLAIN):
        with pytest.raises(KeyMissing, match="'new'"):
            reader.open(sealed, *ad)
    assert Cipher(NEW).open(Cipher(OLD).seal_binary(value, *ad), *ad) == value  # rotated


@pytest.mark.parametrize("stored", [b"", b"{}", b"pg1:", b"pg1:new", b"pg0:x", b"\xff" * 40])
def test_bytes_that_are_no_envelope_are_refused_not_read(stored: bytes) -> None:
    for reader in (Cipher(NEW), PLAIN):
        with pytest.raises((CiphertextInvalid, KeyMissing)):
            reader.open(stored, "t", "c", "r")

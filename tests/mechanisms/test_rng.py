"""Keyed streams: determinism per (secret, label), independence across labels, misuse."""

from __future__ import annotations

import pickle
from collections import Counter

import pytest
from scipy import stats

from tests.stats_helpers import P_MIN, TEST_SECRET
from userdp.transforms.mechanisms.discrete import discrete_gaussian, discrete_laplace
from userdp.transforms.mechanisms.rng import KeyedRng, ReleaseKey, encode_label, new_release_secret

OTHER_SECRET = bytes(range(1, 33))


def _draws(rng: KeyedRng, n: int = 200) -> list[int]:
    return [discrete_laplace(rng, 10) for _ in range(n)] + [
        discrete_gaussian(rng, 4) for _ in range(n)
    ]


def test_same_secret_and_label_give_identical_draws() -> None:
    a = _draws(KeyedRng(TEST_SECRET, "visits", "example.com", "noise"))
    b = _draws(KeyedRng(TEST_SECRET, "visits", "example.com", "noise"))
    assert a == b


def test_release_key_streams_match_keyed_rng_and_survive_pickling() -> None:
    key = pickle.loads(pickle.dumps(ReleaseKey(TEST_SECRET)))
    assert _draws(key.rng("q", 3)) == _draws(KeyedRng(TEST_SECRET, "q", 3))
    assert "secret" not in repr(key).lower().replace("<secret>", "")
    assert TEST_SECRET.hex() not in repr(key)


@pytest.mark.parametrize(
    ("label_a", "label_b"),
    [
        (("visits", "a"), ("visits", "b")),
        (("ab",), ("a", "b")),  # concatenation must not collide
        (("1",), (1,)),  # a string key and an int key are different labels
        ((b"x",), ("x",)),
        (("q", "p", "noise"), ("q", "p", "threshold")),
    ],
)
def test_different_labels_give_different_draws(
    label_a: tuple[str | int | bytes, ...], label_b: tuple[str | int | bytes, ...]
) -> None:
    assert encode_label(label_a) != encode_label(label_b)
    assert KeyedRng(TEST_SECRET, *label_a).read(64) != KeyedRng(TEST_SECRET, *label_b).read(64)


def test_different_secrets_give_different_draws() -> None:
    assert KeyedRng(TEST_SECRET, "q").read(64) != KeyedRng(OTHER_SECRET, "q").read(64)


def test_stream_is_the_same_however_it_is_read() -> None:
    whole = KeyedRng(TEST_SECRET, "q").read(20_000)
    rng = KeyedRng(TEST_SECRET, "q")
    pieces = b"".join(rng.read(k) for k in (1, 7, 300, 4096, 5000, 10_596))
    assert pieces == whole


def test_randbelow_is_uniform() -> None:
    # χ² over 10 cells of 10^5 draws; false rejection probability P_MIN under a fresh secret.
    rng = KeyedRng(TEST_SECRET, "uniformity")
    counts = Counter(rng.randbelow(10) for _ in range(100_000))
    assert stats.chisquare([counts[i] for i in range(10)]).pvalue > P_MIN


def test_new_release_secret_is_32_fresh_bytes() -> None:
    a, b = new_release_secret(), new_release_secret()
    assert len(a) == 32 and a != b


@pytest.mark.parametrize("secret", [b"short", bytes(33), "0" * 32])
def test_bad_secret_is_refused(secret: object) -> None:
    with pytest.raises(ValueError, match="release secret must be 32 bytes"):
        KeyedRng(secret, "q")  # type: ignore[arg-type]


@pytest.mark.parametrize("part", [1.0, True, None, ("nested",)])
def test_non_canonical_label_parts_are_refused(part: object) -> None:
    with pytest.raises(TypeError, match="Canonicalise keys"):
        KeyedRng(TEST_SECRET, "q", part)  # type: ignore[arg-type]


def test_bad_reads_are_refused() -> None:
    rng = KeyedRng(TEST_SECRET, "q")
    with pytest.raises(ValueError, match="negative number of bytes"):
        rng.read(-1)
    with pytest.raises(ValueError, match="non-negative"):
        rng.randbits(-3)
    with pytest.raises(ValueError, match="positive bound"):
        rng.randbelow(0)


def test_uniform_open01_is_strictly_inside_the_unit_interval() -> None:
    class Fixed(KeyedRng):
        """A stream whose bits are fixed, to reach the extreme uniforms."""

        def __init__(self, bits: int) -> None:
            self.bits = bits

        def randbits(self, k: int) -> int:
            return self.bits & ((1 << k) - 1)

    assert Fixed((1 << 52) - 1).uniform_open01() == 1 - 2.0**-53 < 1.0
    assert Fixed(0).uniform_open01() == 2.0**-53 > 0.0

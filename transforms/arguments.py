"""The library's keyword arguments as a job file would hold them, and its public keys checked.

A metric transform's arguments go through the job file's parser (:mod:`.metrics`), so NumPy
scalars and tuples are first made the plain numbers and lists a TOML file holds; a
``public_partitions`` list is checked where the transform is applied — a list known when the
pipeline is built, one value per ``by`` column, each of its column's declared type — with
messages that name the transform.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from apache_beam.pvalue import PCollection

if TYPE_CHECKING:
    from .by_person import People


def plain_param(x: Any) -> Any:
    """A keyword argument as a job file would hold it: NumPy scalars as Python numbers, tuples
    and arrays as lists (``bounds=(0, 1)``, ``bounds=np.array([0., 1.])``)."""
    if isinstance(x, np.generic) or (isinstance(x, np.ndarray) and x.ndim == 0):
        return x.item()  # np.float64(1), np.array(1.0)
    if isinstance(x, (tuple, list, np.ndarray)):
        return [plain_param(v) for v in x]
    return x


def key_tuples(keys: Iterable[Any]) -> tuple[tuple[Any, ...], ...]:
    if isinstance(keys, PCollection):
        raise TypeError(
            "public_partitions must be a list of keys known when the pipeline is built, not a "
            "PCollection (its contents exist only when the pipeline runs): read the keys first, "
            "or select partitions privately (leave public_partitions out)"
        )
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise TypeError(
            f"public_partitions must be a list of keys, got {type(keys).__name__} {keys!r}"
        )
    keys = list(keys)
    for i, k in enumerate(keys):  # a dict or Row raised "unhashable type" from dict.fromkeys
        if isinstance(k, Mapping) or hasattr(k, "as_dict"):  # beam.Row has as_dict
            raise TypeError(
                f"public_partitions[{i}] is a {type(k).__name__}: a key is the value of the one "
                "by column, or a tuple of the by columns' values in by order, e.g. "
                "('FR', 0) for by = ['country', 'day']"
            )
    out = tuple(  # a list is a key of several columns too ([["x", 1]]: unhashable before)
        tuple(plain_param(v) for v in k) if isinstance(k, (tuple, list)) else (plain_param(k),)
        for k in keys
    )
    if not out:
        raise ValueError("public_partitions is empty: list the keys to release")
    return tuple(dict.fromkeys(out))


def check_key_arity(keys: tuple[tuple[Any, ...], ...], by: tuple[str, ...], label: str) -> None:
    """Each public key holds one value per ``by`` column (the keys are public: shown as given)."""
    for i, k in enumerate(keys):
        if len(k) != len(by):
            raise ValueError(
                f"{label}: public_partitions[{i}] = {k if len(k) > 1 else k[0]!r} is not a key "
                f"for by = {list(by)}: give one value per by column (a tuple when there are "
                "several)"
            )


def check_key_types(
    keys: tuple[tuple[Any, ...], ...], by: tuple[str, ...], people: People, label: str
) -> None:
    """Each public key value has its ``by`` column's declared type, checked when the transform
    is applied (the release types them the same way when it runs), and named by the transform."""
    from userdp.pipelines.public_keys import typed_public_keys  # noqa: PLC0415

    if not set(by) <= set(dict(people.schema.keys)):
        return  # an undeclared column: the plan's own check names it
    try:
        typed_public_keys(keys, by, people.schema, strict=True)  # Python values: no text
    except ValueError as e:
        raise ValueError(f"{label}: {e}") from None  # e names public_partitions[i]

"""The names of userdp's own columns, and the rule that keeps input columns from taking them.

Clean tables carry the person id as ``__person__``; raw tables may carry ``__reject__`` (a
reason a row is bad) and ``__raw_line__`` (a malformed line's text); bounding may carry
``__person_hash__``. All have the form ``__…__``, and no input column may be read under a name
of that form (:func:`is_reserved_column`), so a user's column can never stand in for one of them.
A module of its own, without Beam, so the job file's parser can apply the rule cheaply.
"""

from __future__ import annotations

PERSON_COLUMN = "__person__"
REJECT_COLUMN = "__reject__"
RAW_LINE_COLUMN = "__raw_line__"  # a malformed text line, for its dead letter only
PERSON_HASH_COLUMN = "__person_hash__"  # per row: its person's ranking hash (person_hashing.py)


def is_reserved_column(name: str) -> bool:
    """Is ``name`` of the form ``__…__``, the form of userdp's own columns? No input column may
    be read under such a name: a key column named ``__person__`` would replace the person id in
    the clean tables (one person's thousand rows counted as a thousand persons), and
    ``__reject__`` would mark every row bad. Refused where columns are declared (``ByPerson``,
    the job file), before anything runs."""
    return name.startswith("__") and name.endswith("__")

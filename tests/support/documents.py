"""Editing nested documents (a sweep's dict, say) by ``__``-separated paths."""

from __future__ import annotations

import copy


def changed(document: dict, **changes) -> dict:
    """A deep copy of ``document`` with each ``path=value`` of ``changes`` set, where a
    path's parts are separated by ``__`` and digits index lists
    (``cluster__pools__0__nodes=4``)."""
    document = copy.deepcopy(document)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = document
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value
    return document

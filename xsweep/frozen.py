"""Frozen dataclasses that are hashed once: catalog entries and training stacks key the
memos of stage costs, stage times and memory, and a sweep's planning asks those memos
hundreds of thousands of times. A frozen dataclass's own hash builds the tuple of its
fields on every call (a model's or a GPU's twenty fields, a stack's fourteen); the
value cannot change, so :func:`hash_once` keeps it.

The kept value stays in its process: strings hash differently in another interpreter,
so the cache is left out of pickles and copies and made again where it is asked for.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound=type)

_KEPT = "_hash_once"


def hash_once(cls: T) -> T:
    """Class decorator, above ``@dataclass(frozen=True)``: the dataclass's hash (over its
    fields), computed on the first call and kept on the instance."""
    by_fields = cls.__hash__
    if by_fields is None:
        raise TypeError(f"{cls.__name__} has no hash to keep (a frozen dataclass has one)")

    def __hash__(self) -> int:
        try:
            return self.__dict__[_KEPT]
        except KeyError:
            value = by_fields(self)
            object.__setattr__(self, _KEPT, value)  # frozen: set as the dataclass does
            return value

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop(_KEPT, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    cls.__setstate__ = __setstate__
    return cls

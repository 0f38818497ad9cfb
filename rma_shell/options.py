"""Option names at the shell's boundaries: provider constructors that refuse typos.

``@refuses_unknown_options`` on a provider's ``__init__`` checks the keyword names against
the constructor's own parameters before it runs. A misspelled or misplaced name raises
``InvalidOptions`` — a ``TypeError`` (what Python raises for an unexpected keyword) carrying
the ``InvalidOpts`` value with a "did you mean …?" suggestion, or, for a per-run option
given to a provider, a detail saying to pass it to ``run()``/``open_session()``.
``check_run_options`` does the same for ``run()``/``open_session()`` against the provider's
declared ``run_options``, returning the error. The checks themselves are pure
(``rma.session.option_checks``).

Renamed options (issue #22, ``rma.session.option_checks.RENAMED``): an old name is in no
signature; it is taken from the keywords here, passed on under its new name (converted when
its unit changed) with a ``DeprecationWarning`` pointing at the caller, and refused together
with its new name. ``refuses_unknown_options`` does it for a provider's constructor,
``renamed_options`` for any other public function, ``take_renamed`` for ``run()``'s keywords.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar, cast

from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts
from rma.session.option_checks import (
    LIVE_ELSEWHERE,
    LIVE_OPTIONS,
    RUN_OPTIONS,
    Renamed,
    apply_renamed,
    check_model_config,
    check_names,
    renamed_for,
)

F = TypeVar("F", bound=Callable[..., None])
G = TypeVar("G", bound=Callable[..., Any])
_NONE: frozenset[str] = frozenset()
_OK: Result[None, InvalidOpts] = Success(None)


class InvalidOptions(TypeError):
    """A provider was constructed with an option it does not take; ``.error`` is the
    ``InvalidOpts`` (``.error.option`` names it, ``.error.suggestion`` is the closest name)."""

    def __init__(self, error: InvalidOpts) -> None:
        super().__init__(error.message)
        self.error = error


def _library_dirs() -> tuple[str, ...]:
    import rma

    here = os.path.dirname(os.path.abspath(__file__))
    core = os.path.dirname(os.path.abspath(rma.__file__))
    return (here + os.sep, core + os.sep)


_LIBRARY = _library_dirs()
_PLUMBING = (os.sep + "contextlib.py", os.sep + "functools.py")


def _internal(filename: str) -> bool:
    """Whether a frame is rma's own (or the standard plumbing between it and its caller)."""
    return filename.startswith(_LIBRARY) or filename.endswith(_PLUMBING) or filename.startswith("<attrs")


def warn_renamed(used: Iterable[Renamed], where: str) -> None:
    """A ``DeprecationWarning`` per old name used, pointing at the first frame outside rma."""
    entries = tuple(used)
    if not entries:
        return
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    for entry in entries:
        warnings.warn(entry.message(where), DeprecationWarning, stacklevel=level)


def take_renamed(
    given: Mapping[str, Any], owners: Iterable[str], *, where: str, present: Collection[str] = ()
) -> Result[dict[str, Any], InvalidOpts]:
    """``given`` with the owners' old names renamed (warned about), or why both names were given."""
    renamed = _renamed(tuple(owners))
    if not renamed or renamed.keys().isdisjoint(given):
        return Success(dict(given))
    applied = apply_renamed(given, renamed, present=present)
    if isinstance(applied, Failure):
        return Failure(applied.failure())
    out, used = applied.unwrap()
    warn_renamed(used, where)
    return Success(out)


@functools.cache
def _renamed(owners: tuple[str, ...]) -> Mapping[str, Renamed]:
    return renamed_for(owners)


_OWNERS: dict[tuple[type, str], tuple[str, ...]] = {}
_KEPT: dict[type, frozenset[str]] = {}


def owners_of(cls: type, suffix: str = "") -> tuple[str, ...]:
    """The owner names a class's renamed options are filed under: its classes' names."""
    found = _OWNERS.get((cls, suffix))
    if found is None:
        found = _OWNERS[(cls, suffix)] = tuple(
            f"{c.__name__}{suffix}" for c in cls.__mro__ if c is not object
        )
    return found


def kept_aliases(cls: type) -> frozenset[str]:
    """The deprecated per-run names of ``cls`` passed on as themselves (``keeps_meaning``):
    accepted by ``run()`` although no provider declares them (``session_metadata`` on Claude)."""
    found = _KEPT.get(cls)
    if found is None:
        renamed = renamed_for(owners_of(cls, ".run"))
        found = _KEPT[cls] = frozenset(old for old, e in renamed.items() if e.keeps_meaning)
    return found


def renamed_options(owner: str) -> Callable[[G], G]:
    """Decorate a public function (or method, or an attrs ``__init__``) whose options were
    renamed: an old keyword is passed on under its new name with a ``DeprecationWarning``;
    old and new together raise ``InvalidOptions``. The signature shows the new names only."""

    def decorate(fn: G) -> G:
        renamed = renamed_for([owner])
        where = f"{owner}()"

        def renamed_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
            if renamed.keys().isdisjoint(kwargs):
                return kwargs
            applied = take_renamed(kwargs, [owner], where=where)
            if isinstance(applied, Failure):
                raise InvalidOptions(applied.failure())
            return applied.unwrap()

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def accepting_async(*args: Any, **kwargs: Any) -> Any:
                return await fn(*args, **renamed_kwargs(kwargs))

            return cast(G, accepting_async)

        @functools.wraps(fn)
        def accepting(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **renamed_kwargs(kwargs))

        return cast(G, accepting)

    return decorate


def parameter_names(fn: Callable[..., Any]) -> frozenset[str]:
    """The keyword names ``fn`` binds (no ``self``, no ``*args``/``**kwargs``)."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return frozenset(
        p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds and p.name != "self"
    )


def constructor_options(cls: type) -> frozenset[str]:
    """What ``cls(...)`` accepts by name, as its checked ``__init__`` declared it."""
    init = cls.__dict__.get("__init__") or getattr(cls, "__init__")  # noqa: B009
    declared = getattr(init, "option_names", None)
    return declared if isinstance(declared, frozenset) else parameter_names(init)


def refuses_unknown_options(init: F, *, also: frozenset[str] = frozenset()) -> F:
    """Decorate a provider's ``__init__``: unknown keyword names raise ``InvalidOptions``.
    ``also``: the names its ``**options`` take (an ``Agent``'s ``AgentOptions``)."""
    accepted = parameter_names(init) | also
    owner = init.__qualname__.split(".")[0]

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        renamed = take_renamed(kwargs, owners_of(type(self)), where=f"{type(self).__name__}(...)")
        if isinstance(renamed, Failure):
            raise InvalidOptions(renamed.failure())
        kwargs = renamed.unwrap()
        unknown = [name for name in kwargs if name not in accepted]
        if unknown:
            per_run = (RUN_OPTIONS | frozenset(getattr(type(self), "run_options", ()))) - accepted
            moved = {name: f"it is per run: pass {name}= to run()/open_session()" for name in per_run}
            found = check_names(unknown, accepted, where=f"{owner}(...)", elsewhere=moved)
            if isinstance(found, Failure):
                raise InvalidOptions(found.failure())
        init(self, *args, **kwargs)

    checked.option_names = accepted  # type: ignore[attr-defined]
    return cast(F, checked)


def check_run_options(
    provider: object, given: Mapping[str, Any], *, live: bool, model_config: object
) -> Result[None, InvalidOpts]:
    """``run()``/``open_session()``'s extra keyword names against what ``provider`` declares
    (``Provider.run_options``), then ``model_config`` against whether it picks a model per run.

    A name that is one of the provider's constructor settings gets a detail saying so; on
    ``open_session`` a ``timeout=`` gets a pointer to anyio's deadlines.
    """
    run_options: frozenset[str] = getattr(provider, "run_options", _NONE)
    kept = kept_aliases(type(provider))
    if kept:
        run_options = frozenset(run_options) | kept
    # Only the provider's own names reach here (run()'s are its parameters): the common case
    # is a set lookup per name; the signature is read only to explain a refusal.
    for n in given:
        if n not in run_options:
            break
    else:
        if model_config is None:
            return _OK
    name = type(provider).__name__
    run_options = frozenset(run_options)  # a subclass may have declared a set or a tuple
    if not run_options.issuperset(given):
        own = LIVE_OPTIONS if live else RUN_OPTIONS
        settings = constructor_options(type(provider)) - run_options - own
        moved = {n: f"it is a setting of the provider: pass it to {name}(...)" for n in settings}
        if live:
            moved.update(LIVE_ELSEWHERE)
        where = f"{'open_session' if live else 'run'}() with {name}"
        found = check_names(given, own | run_options, where=where, elsewhere=moved)
        if isinstance(found, Failure):
            return found
    keys = getattr(provider, "model_config_keys", frozenset({"metadata"}))
    return check_model_config(
        model_config, provider=name, per_run_model="model_config" in run_options, keys=frozenset(keys)
    )

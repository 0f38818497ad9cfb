"""Can the session properties fail? Break the machine on purpose and see them catch it.

Not collected by pytest. Run ``python -m properties.mutants [NAME ...]`` from the
repository root: each mutant monkeypatches one behaviour of the core (nothing on disk
changes), runs the simulated-shell world until an invariant trips, restores the
original, and prints CAUGHT with the violation, or MISSED. A MISSED mutant means a
property lost its teeth (or needs more examples: ``--examples N``).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import properties._world as W
import rma.replay as R
from rma._persistent import AppendLog, SeenIds
from rma.providers.scripted import ScriptedCodec
from rma.session import commands as C
from rma.session import completing, driving, endings, receiving, reconnecting, telemetry
from rma.session import machine as M
from rma.session.events import StreamEvent

SESSION_MODULES = (M, completing, driving, endings, receiving, reconnecting, telemetry)

MUTANTS: dict[str, Callable[[Any], None]] = {}


def mutant(fn: Callable[[Any], None]) -> Callable[..., None]:
    MUTANTS[fn.__name__] = fn
    return fn


class Patch:
    """``patch(obj, name, value)`` sets an attribute until the mutant is over;
    ``patch.everywhere(original, value)`` rebinds every name in the session modules and every
    entry of the machine's table that refers to ``original`` (a handler imported by name into
    another module, or held by the table, is reached only there)."""

    def __init__(self) -> None:
        self.saved: list[Callable[[], None]] = []

    def __call__(self, obj: object, name: str, value: Any) -> None:
        before = getattr(obj, name)
        self.saved.append(lambda: setattr(obj, name, before))
        setattr(obj, name, value)

    def item(self, mapping: Any, key: Any, value: Any) -> None:
        before = mapping[key]
        self.saved.append(lambda: mapping.__setitem__(key, before))
        mapping[key] = value

    def everywhere(self, original: Any, value: Any) -> None:
        for module in SESSION_MODULES:
            for name, bound in list(vars(module).items()):
                if bound is original:
                    self(module, name, value)
        for row in M.TRANSITIONS.values():
            for cls, entry in list(row.items()):
                if isinstance(entry, M.ByMode):
                    entry = attrs.evolve(
                        entry,
                        streaming=self._replaced(entry.streaming, original, value),
                        request_response=self._replaced(entry.request_response, original, value),
                    )
                    if entry != row[cls]:
                        self.item(row, cls, entry)
                elif isinstance(entry, M.Go) and entry.handler is original:
                    self.item(row, cls, attrs.evolve(entry, handler=value))

    @staticmethod
    def _replaced(entry: Any, original: Any, value: Any) -> Any:
        if isinstance(entry, M.Go) and entry.handler is original:
            return attrs.evolve(entry, handler=value)
        return entry

    def undo(self) -> None:
        for restore in reversed(self.saved):
            restore()


@contextmanager
def patched() -> Iterator[Patch]:
    patch = Patch()
    try:
        yield patch
    finally:
        patch.undo()


def hunt(examples: int) -> str | None:
    """The first violation the world finds in ``examples`` runs, or None."""
    found: list[str] = []

    @settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.generate],
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data(), p=W.params())
    def run(data: st.DataObject, p: W.Params) -> None:
        try:
            W.check_trace(W.World(data.draw, p).run())
        except W.Violation as exc:
            found.append(str(exc)[:120])
            raise
        except Exception as exc:
            found.append(f"WORLD ERROR (not a violation): {exc!r}"[:120])
            raise

    with suppress(Exception):
        run()
    return found[0] if found else None


# ── the mutants: one broken promise each ───────────────────────────────────────────────


@mutant
def empty_resume(patch: Any) -> None:  # invariant 1
    patch(ScriptedCodec, "resume_input", lambda self, uses, results: [])


@mutant
def results_out_of_order(patch: Any) -> None:  # T-1
    original = ScriptedCodec.resume_input
    patch(ScriptedCodec, "resume_input", lambda self, u, r: list(reversed(original(self, u, r))))


@mutant
def no_duplicate_warning(patch: Patch) -> None:  # invariant 2, T-12
    original = telemetry.tool_uses
    patch.everywhere(original, lambda s, uses: [c for c in original(s, uses) if not isinstance(c, C.Log)])


@mutant
def tool_runs_twice(patch: Patch) -> None:  # invariant 2
    original = completing.run_tools
    patch.everywhere(original, lambda s, uses, out, *rest: original(s, [*uses, uses[0]], out, *rest))


@mutant
def max_turns_off_by_one(patch: Patch) -> None:  # invariant 3 (the reference's S-35)
    patch.everywhere(completing.exceeds_max_turns, lambda s: s.turns > s.config.max_turns)


@mutant
def result_overcounts_turns(patch: Patch) -> None:  # invariant 3
    original = endings.result_of
    patch.everywhere(original, lambda s, *a: attrs.evolve(original(s, *a), turns=original(s, *a).turns + 1))


@mutant
def usage_drops_output_tokens(patch: Patch) -> None:  # invariant 4
    original = M.Accumulated.add_turn

    def add_turn(self: Any, events: Any, tr: Any) -> Any:
        if tr.usage is not None:
            tr = attrs.evolve(tr, usage=attrs.evolve(tr.usage, output_tokens=0))
        return original(self, events, tr)

    patch(M.Accumulated, "add_turn", add_turn)


@mutant
def guard_sees_wrong_turns(patch: Patch) -> None:  # S-38
    original = completing.handle_turn

    def handle(s: Any, events: Any) -> Any:
        s, out = original(s, events)
        bump = [
            C.CallGuard({**c.payload, "turns": c.payload["turns"] + 1}) if isinstance(c, C.CallGuard) else c
            for c in out
        ]
        return s, tuple(bump)

    patch.everywhere(original, handle)


@mutant
def two_finishes(patch: Patch) -> None:  # invariant 5
    original = endings.finish

    def finish(*a: Any, **k: Any) -> Any:
        s, out = original(*a, **k)
        return s, (*out, *[c for c in out if isinstance(c, C.Finish)])

    patch.everywhere(original, finish)


@mutant
def sync_run_not_done(patch: Patch) -> None:  # invariant 5
    patch.everywhere(
        endings.after_request,
        lambda s: attrs.evolve(s, phase=M.Phase.IDLE, request_open=False, resuming=False),
    )


@mutant
def live_error_unreported(patch: Patch) -> None:  # invariant 5 (S-66 Better)
    original = endings.fail

    def fail(s: Any, error: Any) -> Any:
        s2, out = original(s, error)
        return (s2, tuple(c for c in out if not isinstance(c, C.Finish))) if s.config.live else (s2, out)

    patch.everywhere(original, fail)


@mutant
def second_reply(patch: Patch) -> None:  # S-7
    original = driving.on_push_finished

    def pushed(s: Any, ev: Any) -> Any:
        s2, out = original(s, ev)
        return s2, (*out, *[c for c in out if isinstance(c, C.Reply)])

    patch.everywhere(original, pushed)


@mutant
def nondeterministic_telemetry(patch: Patch) -> None:  # invariant 6
    counter = itertools.count()
    patch.everywhere(
        telemetry.stream_event, lambda s, raw: C.Emit("rma.stream.event", {"n": next(counter)}, {})
    )


@mutant
def append_log_never_forks(patch: Patch) -> None:  # invariant 7
    def append(self: Any, item: Any) -> Any:
        self._store.append(item)
        return AppendLog(self._store, self._size + 1)

    def extend(self: Any, items: Any) -> Any:
        self._store.extend(items)
        return AppendLog(self._store, len(self._store))

    patch(AppendLog, "append", append)
    patch(AppendLog, "extend", extend)


@mutant
def recovery_readds_known_ids(patch: Patch) -> None:  # invariant 8
    def add(self: Any, uses: Any) -> Any:
        return attrs.evolve(self, custom_tool_uses=self.custom_tool_uses.extend(uses))

    patch(M.Accumulated, "add_new_tool_uses", add)


@mutant
def no_dedupe_by_id(patch: Patch) -> None:  # E-11
    original = receiving.receive
    patch.everywhere(original, lambda s, raw: original(attrs.evolve(s, seen=SeenIds()), raw))


@mutant
def stale_generation_processed(patch: Patch) -> None:  # S-24
    original = M._stale
    patch(M, "_stale", lambda s, ev: False if isinstance(ev, StreamEvent) else original(s, ev))


@mutant
def flat_backoff(patch: Patch) -> None:
    patch.everywhere(reconnecting.reconnect_backoff_ms, lambda attempt: 500)


@mutant
def batch_and_live_delivery(patch: Patch) -> None:  # E-5
    def polled(s: Any, ev: Any) -> Any:
        s, out = completing.handle_turn(attrs.evolve(s, live_forwarded=0), ev.events)
        return s, (*[C.DeliverEvent(e) for e in ev.events], *out)

    patch.everywhere(receiving.on_polled, polled)


@mutant
def no_text_delta(patch: Patch) -> None:  # E-9
    patch.everywhere(receiving.forward, lambda s, raw: [C.DeliverEvent(raw)])


@mutant
def follow_up_blocks_the_stream(patch: Patch) -> None:  # the head-of-line hang, as first found
    def step(s: Any, ev: Any) -> Any:
        if s.phase is M.Phase.DONE:
            return s, ()
        entry = M.entry_for(s, ev)
        if entry is M.DEFER:
            return attrs.evolve(s, deferred=(*s.deferred, ev)), ()
        s, out = M._take(s, ev, entry)
        if not s.deferred or s.phase is M.Phase.DONE or M.entry_for(s, s.deferred[0]) is M.DEFER:
            return s, out
        queue, s, more = s.deferred, attrs.evolve(s, deferred=()), list(out)
        for i, waiting in enumerate(queue):
            if s.phase is M.Phase.DONE:
                break
            entry = M.entry_for(s, waiting)
            if entry is M.DEFER:
                s = attrs.evolve(s, deferred=(*queue[i:], *s.deferred))
                break
            s, cmds = M._take(s, waiting, entry)
            more.extend(cmds)
        return s, tuple(more)

    for module in (M, W, R):
        patch(module, "step", step)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *MUTANTS], metavar="NAME", help=", ".join(MUTANTS))
    parser.add_argument("--examples", type=int, default=400)
    args = parser.parse_args(argv)
    baseline = hunt(args.examples // 2)
    print(f"{'(unmutated)':28} {'CLEAN' if baseline is None else 'FAILS: ' + baseline}")
    missed = 0
    for name in args.names or MUTANTS:
        with patched() as patch:
            MUTANTS[name](patch)
            found = hunt(args.examples)
        missed += found is None
        print(f"{name:28} {'CAUGHT  ' + found if found else 'MISSED'}")
    return 1 if missed or baseline else 0


if __name__ == "__main__":
    raise SystemExit(main())

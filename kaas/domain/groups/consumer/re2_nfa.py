"""The whole-name matcher of topic regexes: a lazily built DFA over a Thompson NFA of the
expression tree ``re2_syntax`` parses. ``Program(tree).run(name)`` runs in time linear in
the name (RE2/J's guarantee), where Python's backtracking ``re`` is exponential on some
patterns. Pure: no I/O; the DFA cache is bounded.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from kaas.domain.groups.consumer.re2_syntax import Alt, Assert, Cat, CharSet, Node

__all__ = ["Program"]

# Python's backtracking ``re`` takes exponential time on patterns such as ``(a|a)*b`` (26
# characters of ``a`` take seconds), and a member may send any pattern; RE2/J is linear.
# So ``topic_regex.matches`` does not run the Python pattern: it simulates the expression's NFA, caching
# the DFA states it meets, in time linear in the topic name (bounded by ``MAX_PROGRAM``).

_SET, _SPLIT, _ASSERT_OP, _NOP, _MATCH = range(5)
_Frag = tuple[int, list[tuple[int, int]]]  # an NFA fragment: its start and its dangling exits
_CACHE_LIMIT = 10_000


@dataclass(slots=True)
class _Inst:
    op: int
    bounds: tuple[int, ...] = ()  # a SET's ranges, flattened: lo, hi, lo, hi, ...
    kind: str = ""  # an ASSERT's kind
    out: int = -1
    out1: int = -1


class Program:
    """The NFA of one expression and the DFA states and transitions met so far."""

    def __init__(self, tree: Node) -> None:
        self.insts: list[_Inst] = []
        start, holes = self._build(tree)
        match = self._emit(_Inst(_MATCH))
        self._patch(holes, match)
        self.start = frozenset({start})
        self._closures: dict[tuple[frozenset[int], int], tuple[frozenset[int], bool]] = {}
        self._steps: dict[tuple[frozenset[int], str], frozenset[int]] = {}

    def _emit(self, inst: _Inst) -> int:
        self.insts.append(inst)
        return len(self.insts) - 1

    def _patch(self, holes: list[tuple[int, int]], target: int) -> None:
        for pc, slot in holes:
            if slot == 0:
                self.insts[pc].out = target
            else:
                self.insts[pc].out1 = target

    def _build(self, node: Node) -> _Frag:
        if isinstance(node, CharSet):
            pc = self._emit(_Inst(_SET, bounds=tuple(x for r in node.ranges for x in r)))
            return pc, [(pc, 0)]
        if isinstance(node, Assert):
            pc = self._emit(_Inst(_ASSERT_OP, kind=node.kind))
            return pc, [(pc, 0)]
        if isinstance(node, Alt):
            pieces = [self._build(sub) for sub in node.subs]
            start, holes = pieces[-1]
            for sub_start, sub_holes in reversed(pieces[:-1]):
                start = self._emit(_Inst(_SPLIT, out=sub_start, out1=start))
                holes = sub_holes + holes
            return start, holes
        if isinstance(node, Cat):
            return self._chain([partial(self._build, sub) for sub in node.subs])
        # x{min,max}: min copies, then x* or (max - min) copies of x? (the same language).
        copies = [partial(self._build, node.sub)] * node.min
        if node.max == -1:
            copies.append(partial(self._loop, node.sub))
        else:
            copies.extend([partial(self._optional, node.sub)] * (node.max - node.min))
        return self._chain(copies)

    def _chain(self, parts: Sequence[Callable[[], _Frag]]) -> _Frag:
        if not parts:
            pc = self._emit(_Inst(_NOP))
            return pc, [(pc, 0)]
        start, holes = parts[0]()
        for part in parts[1:]:
            nxt, nxt_holes = part()
            self._patch(holes, nxt)
            holes = nxt_holes
        return start, holes

    def _loop(self, sub: Node) -> _Frag:
        split = self._emit(_Inst(_SPLIT))
        body, holes = self._build(sub)
        self.insts[split].out = body
        self._patch(holes, split)
        return split, [(split, 1)]

    def _optional(self, sub: Node) -> _Frag:
        body, holes = self._build(sub)
        split = self._emit(_Inst(_SPLIT, out=body))
        return split, [*holes, (split, 1)]

    def closure(self, state: frozenset[int], ctx: int) -> tuple[frozenset[int], bool]:
        """The SET instructions reachable without input at a position, and whether MATCH is."""
        key = (state, ctx)
        found = self._closures.get(key)
        if found is not None:
            return found
        before, after = divmod(ctx, 4)
        seen: set[int] = set()
        sets: set[int] = set()
        accept = False
        todo = list(state)
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            inst = self.insts[pc]
            if inst.op == _SET:
                sets.add(pc)
            elif inst.op == _MATCH:
                accept = True
            elif inst.op == _SPLIT:
                todo += (inst.out, inst.out1)
            elif inst.op == _NOP or _holds(inst.kind, before, after):
                todo.append(inst.out)
        found = (frozenset(sets), accept)
        if len(self._closures) > _CACHE_LIMIT:
            self._closures.clear()
        self._closures[key] = found
        return found

    def step(self, sets: frozenset[int], ch: str) -> frozenset[int]:
        """The instructions after consuming ``ch`` from the SET instructions ``sets``."""
        key = (sets, ch)
        found = self._steps.get(key)
        if found is not None:
            return found
        c = ord(ch)
        nxt: set[int] = set()
        for pc in sets:
            inst = self.insts[pc]
            at = bisect_right(inst.bounds, c)
            if at % 2 == 1 or (at and inst.bounds[at - 1] == c):
                nxt.add(inst.out)
        found = frozenset(nxt)
        if len(self._steps) > _CACHE_LIMIT:
            self._steps.clear()
        self._steps[key] = found
        return found

    def run(self, topic: str) -> bool:
        state = self.start
        prev = _NONE
        for i in range(len(topic) + 1):
            ch = topic[i] if i < len(topic) else ""
            kind = _kind(ch)
            sets, accept = self.closure(state, prev * 4 + kind)
            if not ch:
                return accept
            state = self.step(sets, ch)
            if not state:
                return False
            prev = kind
        return False  # pragma: no cover - the loop returns at the end of the name


_NONE, _NEWLINE, _WORD_CHAR, _OTHER = range(4)


def _kind(ch: str) -> int:
    if not ch:
        return _NONE
    if ch == "\n":
        return _NEWLINE
    return _WORD_CHAR if ch.isascii() and (ch.isalnum() or ch == "_") else _OTHER


def _holds(kind: str, before: int, after: int) -> bool:
    """Whether an empty-width assertion holds between characters of kinds ``before``/``after``."""
    if kind == "begin_text":
        return before == _NONE
    if kind == "end_text":
        return after == _NONE
    if kind == "begin_line":
        return before in (_NONE, _NEWLINE)
    if kind == "end_line":
        return after in (_NONE, _NEWLINE)
    boundary = (before == _WORD_CHAR) != (after == _WORD_CHAR)
    return boundary if kind == "word" else not boundary

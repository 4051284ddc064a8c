"""A timeline picture for a chaos run: committed transactions per second, each fault marked.

    from timeline import Fault, write_svg
    write_svg(path, commit_times, [Fault(t, "kill", "SIGKILL broker 1")], t0=start, title="random-kills")

A self-contained SVG (no dependency, no script, no external font), to open in a browser:
one bar per second of committed transactions, a dashed vertical line per fault in the
colour of its kind (hover a line for its full label), the longest stretch without a commit
shaded (between two commits). Times are wall-clock seconds (``time.time()``); the x axis is seconds since ``t0``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple
from xml.sax.saxutils import escape

# fault kind -> (colour, legend text)
KINDS = {
    "kill": ("#d62728", "broker SIGKILL / crash"),
    "restart": ("#2ca02c", "broker restarted"),
    "stop": ("#9467bd", "broker SIGSTOP"),
    "cont": ("#17becf", "broker SIGCONT"),
    "copier-kill": ("#ff7f0e", "copier SIGKILL"),
    "copier-restart": ("#8c564b", "copier restarted"),
    "copier-stop": ("#e377c2", "copier stopped (rolling upgrade)"),
    "disk": ("#7f7f7f", "volume full / freed"),
    "other": ("#bcbd22", "other"),
}

W, H = 960, 360
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 40, 64


class Fault(NamedTuple):
    at: float  # wall clock, seconds
    kind: str  # a key of KINDS
    label: str


def per_second(commit_times: Iterable[float], t0: float, seconds: int) -> list[int]:
    """Committed transactions in each whole second since ``t0`` (``seconds`` bins)."""
    bins = [0] * seconds
    for t in commit_times:
        i = int(t - t0)
        if 0 <= i < seconds:
            bins[i] += 1
    return bins


def longest_gap(commit_times: Sequence[float]) -> tuple[float, float] | None:
    """The longest stretch without a commit between two consecutive commits (start-up and
    the finished tail are not stretches without progress): (start, end), None for fewer
    than two commits."""
    ts = sorted(commit_times)
    if len(ts) < 2:
        return None
    return max(zip(ts, ts[1:]), key=lambda ab: ab[1] - ab[0])


def svg(commit_times: Sequence[float], faults: Sequence[Fault], *, t0: float, t1: float | None = None,
        title: str = "") -> str:
    """The picture as SVG text. ``t1``: end of the run (default: the last commit or fault)."""
    last = max([*commit_times, *(f.at for f in faults), t0 + 1])
    t1 = max(t1 if t1 is not None else last, t0 + 1)
    seconds = max(1, math.ceil(t1 - t0))
    bins = per_second(commit_times, t0, seconds)
    ymax = max(1, max(bins))
    ystep = _nice_step(ymax)
    ytop = ystep * math.ceil(ymax / ystep)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(s: float) -> float:
        return LEFT + pw * s / seconds

    def y(v: float) -> float:
        return TOP + ph * (1 - v / ytop)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<text x="{LEFT}" y="31" fill="#555">committed transactions per second; '
           f'{len(commit_times)} commits; dashed lines: faults and restarts</text>']
    gap = longest_gap(commit_times)
    if gap is not None:
        g0, g1 = gap
        out.append(f'<rect class="gap" x="{x(g0 - t0):.1f}" y="{TOP}" width="{max(0.5, x(g1 - t0) - x(g0 - t0)):.1f}" '
                   f'height="{ph}" fill="#fde0dd" opacity="0.6"><title>longest stretch without a commit: '
                   f'{g1 - g0:.2f} s</title></rect>')
    for v in range(0, ytop + 1, ystep):  # y grid and labels
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    xstep = _nice_step(seconds, 12)
    for s in range(0, seconds + 1, xstep):
        out.append(f'<line x1="{x(s):.1f}" x2="{x(s):.1f}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#333"/>')
        out.append(f'<text x="{x(s):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{TOP + ph + 30}" text-anchor="middle">seconds</text>')
    bw = max(0.5, pw / seconds - 1)
    for i, n in enumerate(bins):
        if n:
            out.append(f'<rect class="bar" x="{x(i):.1f}" y="{y(n):.1f}" width="{bw:.1f}" '
                       f'height="{y(0) - y(n):.1f}" fill="#4c78a8"><title>{i} s: {n} commits</title></rect>')
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#333"/>')
    for f in faults:
        colour = KINDS.get(f.kind, KINDS["other"])[0]
        fx = x(min(max(f.at - t0, 0), seconds))
        out.append(f'<line class="fault" data-kind="{escape(f.kind)}" x1="{fx:.1f}" x2="{fx:.1f}" y1="{TOP}" '
                   f'y2="{TOP + ph}" stroke="{colour}" stroke-width="1.5" stroke-dasharray="4 3">'
                   f'<title>{f.at - t0:.1f} s: {escape(f.label)}</title></line>')
    lx = LEFT
    for kind in dict.fromkeys(f.kind for f in faults):  # legend: the kinds present, in order
        colour, text = KINDS.get(kind, KINDS["other"])
        out.append(f'<line x1="{lx}" x2="{lx + 16}" y1="{H - 12}" y2="{H - 12}" stroke="{colour}" '
                   f'stroke-width="2" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{lx + 20}" y="{H - 8}">{escape(text)}</text>')
        lx += 28 + 6.2 * len(text)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(path: Path, commit_times: Sequence[float], faults: Sequence[Fault], *, t0: float,
              t1: float | None = None, title: str = "") -> Path:
    """Write :func:`svg` to ``path``; returns it."""
    path = Path(path)
    path.write_text(svg(commit_times, faults, t0=t0, t1=t1, title=title))
    return path


def _nice_step(span: float, ticks: int = 5) -> int:
    """A 1/2/5 x 10^k step giving about ``ticks`` ticks over ``span``."""
    raw = max(1.0, span / ticks)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return int(m * mag)
    return int(10 * mag)

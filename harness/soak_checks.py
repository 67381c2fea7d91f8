"""What a soak must show, checked on its result: every request answered and
every answer its reference's, failures only while a killed stub's model is
repaired, every class of the mix sent, every reload and kill recovered, and
each process's memory, descriptors and threads flat after warm-up. The
suite's test asserts these; perf/soak.py reports them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from statistics import median

from harness.soak_mix import (
    KILL_SETTLE_S,
    LEVEL_ALLOWANCES,
    LEVEL_SAMPLES,
    RSS_GROWTH_PER_100K,
    RSS_SHORT_ALLOWANCE,
    SLOPE_MIN_REQUESTS,
    WEIGHTS,
)
from harness.soak_run import (
    CANCELLED,
    DROPPED,
    EXPIRED,
    FAILED,
    LOST,
    REFUSED,
    RIGHT,
    WRONG,
    Outcome,
    SoakResult,
)
from harness.soak_series import Point, Series, growth_per_100k, series_of

# What each class of the mix must have shown at least once, so that a run
# that never reached a behaviour cannot pass for one that held it.
SHOWN = {
    "good": RIGHT,
    "traced": RIGHT,
    "bad": RIGHT,
    "cancelled": CANCELLED,
    "deadline": EXPIRED,
    "dropped": DROPPED,
}


# The checks, in the order checks() gives them.
ANSWERED = "every request answered"
AS_REFERENCE = "every answer its reference's"
FAILED_IN_REPAIR = "failures only while a killed stub's model is repaired"
EVERY_CLASS = "every class of the mix shown"
RECOVERED = "every reload done and every killed stub replaced"
STUBS_BACK = "stubs back to what the catalog asks"
TRACED = "traced requests traced on every route"
FLAT = "memory, descriptors, threads and shared memory flat after warm-up"
CHECK_NAMES = (
    ANSWERED,
    AS_REFERENCE,
    FAILED_IN_REPAIR,
    EVERY_CLASS,
    RECOVERED,
    STUBS_BACK,
    TRACED,
    FLAT,
)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Growth:
    """One process's series after its warm-up."""

    label: str
    metric: str
    per_100k: float | None  # Theil-Sen slope against requests, per 100,000
    rise: float  # over the window: the slope's (RSS), the levels' (others)
    requests: int  # answered over the window
    allowed: float  # the most `rise` may be
    judged_by: str  # "slope", "short run" or "level"

    @property
    def held(self) -> bool:
        return self.rise <= self.allowed


def _warmup_of(series: Series, warmup_s: float) -> float:
    """A process started after the run's warm-up (a reload's or a kill's
    replacement) warms up as long from its first sample."""
    first = series.points[0][0]
    return warmup_s if first < warmup_s else first + warmup_s


def _level(points: list[Point]) -> float:
    return float(median(point[2] for point in points))


def _level_rise(window: list[Point], kills: list[tuple[float, float]]) -> float:
    """The largest rise of the level between kills: each stub death with
    requests in flight leaves its old instance in tritonserver, threads and
    all, a step Triton 2.51 never takes back (docs/operations.md, "Staying
    up"), which the checks count apart from a drift."""
    rises = []
    for start, end in _spans(window[0][0], window[-1][0], kills):
        span = [point for point in window if start <= point[0] <= end]
        if len(span) >= 2 * LEVEL_SAMPLES:
            rises.append(_level(span[-LEVEL_SAMPLES:]) - _level(span[:LEVEL_SAMPLES]))
    return max(rises, default=0.0)


def _spans(start: float, end: float, kills: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """[start, end] without each kill's repair (kill to back, and a settle)."""
    spans, at = [], start
    for killed, back in sorted(kills):
        if killed > at:
            spans.append((at, min(killed, end)))
        at = max(at, back + KILL_SETTLE_S)
    if at < end:
        spans.append((at, end))
    return spans


def _growth(series: Series, after_s: float, kills: list[tuple[float, float]]) -> Growth | None:
    window = [point for point in series.points if point[0] >= after_s]
    if len(window) < max(3, 2 * LEVEL_SAMPLES):
        return None
    requests = window[-1][1] - window[0][1]
    slope = growth_per_100k(series, after_s)
    if series.metric != "rss_bytes":
        rise = _level_rise(window, kills)
        allowed = LEVEL_ALLOWANCES[series.metric]
        return Growth(series.label, series.metric, slope, rise, requests, allowed, "level")
    if requests >= SLOPE_MIN_REQUESTS:
        rise, allowed, judged_by = slope or 0.0, RSS_GROWTH_PER_100K, "slope"
    else:
        rise = (slope or 0.0) * requests / 100_000
        allowed = RSS_GROWTH_PER_100K * requests / 100_000 + RSS_SHORT_ALLOWANCE
        judged_by = "short run"
    return Growth(series.label, series.metric, slope, rise, requests, allowed, judged_by)


def growths(result: SoakResult) -> list[Growth]:
    # A kill never repaired spans the rest of the run.
    kills = [
        (event.at_s, event.done_s if event.done_s is not None else float("inf"))
        for event in result.events
        if event.kind == "kill"
    ]
    found = []
    for metric in ("rss_bytes", *LEVEL_ALLOWANCES):
        for series in series_of(result.samples, metric):
            growth = _growth(series, _warmup_of(series, result.warmup_s), kills)
            if growth is not None:
                found.append(growth)
    return found


def kill_steps(result: SoakResult, label: str, metric: str) -> list[float]:
    """The level of `label`'s `metric` after each kill's repair against
    before it: what each death left behind."""
    (series,) = [each for each in series_of(result.samples, metric) if each.label == label]
    steps = []
    for event in result.events:
        if event.kind != "kill" or event.done_s is None:
            continue
        before = [p for p in series.points if p[0] < event.at_s][-LEVEL_SAMPLES:]
        after = [p for p in series.points if p[0] >= event.done_s + KILL_SETTLE_S][:LEVEL_SAMPLES]
        if before and after:
            steps.append(_level(after) - _level(before))
    return steps


def _in_repair(outcome: Outcome, result: SoakResult) -> bool:
    """In flight while a killed stub of its model was being replaced."""
    for event in result.events:
        if event.kind != "kill" or result.stage_models.get(event.target) != outcome.model:
            continue
        end = event.done_s if event.done_s is not None else float("inf")
        if outcome.started_s <= end and outcome.ended_s >= event.at_s:
            return True
    return False


def _examples(outcomes: list[Outcome]) -> str:
    shown = "; ".join(
        f"{outcome.case} at {outcome.started_s:.1f} s: {outcome.status} {outcome.message}"
        for outcome in outcomes[:3]
    )
    return f"{len(outcomes)}, e.g. {shown}" if outcomes else "none"


def checks(result: SoakResult) -> list[Check]:
    outcomes = result.outcomes
    verdicts = Counter((outcome.kind, outcome.verdict) for outcome in outcomes)
    lost = [outcome for outcome in outcomes if outcome.verdict == LOST]
    wrong = [outcome for outcome in outcomes if outcome.verdict == WRONG]
    stray = [
        outcome
        for outcome in outcomes
        if outcome.verdict == FAILED and not _in_repair(outcome, result)
    ]
    unshown = [kind for kind in WEIGHTS if not verdicts[kind, SHOWN[kind]]]
    bursts = verdicts["burst", RIGHT], verdicts["burst", REFUSED]
    unrecovered = [event for event in result.events if event.done_s is None]
    kinds = Counter(event.kind for event in result.events)
    held = growths(result)
    over = [growth for growth in held if not growth.held]
    return [
        Check(ANSWERED, not lost, f"lost: {_examples(lost)}"),
        Check(AS_REFERENCE, not wrong, f"other answers: {_examples(wrong)}"),
        Check(
            FAILED_IN_REPAIR,
            not stray,
            f"failed elsewhere: {_examples(stray)}",
        ),
        Check(
            EVERY_CLASS,
            not unshown and all(bursts),
            f"not shown: {unshown or 'none'}; bursts answered {bursts[0]}, refused {bursts[1]}",
        ),
        Check(
            RECOVERED,
            not unrecovered and kinds["reload"] > 0 and kinds["kill"] > 0,
            f"{kinds['reload']} reloads, {kinds['kill']} kills; not recovered: "
            + (", ".join(f"{e.kind} {e.target} ({e.detail})" for e in unrecovered) or "none"),
        ),
        Check(
            STUBS_BACK,
            result.stubs_after == result.stubs_asked,
            f"asked {result.stubs_asked}, after {result.stubs_after}",
        ),
        Check(
            TRACED,
            bool(result.traces_found) and all(found for found, _ in result.traces_found.values()),
            ", ".join(
                f"{route}: {found} of {looked} in Jaeger"
                for route, (found, looked) in sorted(result.traces_found.items())
            ),
        ),
        Check(
            FLAT,
            bool(held) and not over,
            f"{len(held)} series; over: "
            + (", ".join(f"{g.label} {g.metric}" for g in over) or "none"),
        ),
    ]

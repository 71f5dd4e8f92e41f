"""The benchmark's results and how they are reported: pure data and arithmetic, a text table, the markdown page
and the chart. Nothing here talks to Kafka, so tests/benchmarks/test_bench_report.py covers it on its own."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MIRRORFLOW, MM2, RAW = "mirrorflow", "mm2", "raw"
BEGIN, END = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"


@dataclass(frozen=True)
class Run:
    """One timed copy (or raw write) of one case: `records` records of `value_bytes` value bytes in `seconds`.

    `startup_s` is the part of `seconds` before the first record reached the target (process start, discovery,
    fencing); `eos` tells which MM2 run a Mirrorflow variant is compared with (None: not a replicator).
    """

    case: str
    variant: str
    kind: str
    records: int
    value_bytes: int
    seconds: float
    eos: bool | None = None
    startup_s: float | None = None
    peak_rss_mib: float | None = None
    task_rss_mib: float | None = None  # the largest single process running copy tasks (the 512 MB goal)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def steady_rate(self) -> float | None:
        """Records/s once the first record arrived (start-up excluded)."""
        if self.startup_s is None or self.seconds - self.startup_s <= 0:
            return None
        return self.records / (self.seconds - self.startup_s)

    @property
    def throughput(self) -> float:
        """What the goals compare: the steady rate where start-up was measured, else the whole run's."""
        return self.steady_rate or self.rate


@dataclass(frozen=True)
class Latency:
    """End-to-end latency samples (ms, source create time to target append time) of one replicator."""

    case: str
    variant: str
    target_rate: float
    achieved_rate: float
    samples: tuple[int, ...]
    longest_gap_ms: float | None = None
    """The longest time between two consecutive arrivals of stamped records on the target (after the warm-up):
    how long the replicator stood still, e.g. at a continuous DAG run's boundary."""
    windows: tuple[tuple[int, float], ...] = ()
    """(window start, epoch ms; p99 ms) of the samples produced in each `WINDOW_MS` window: which stretch of the
    run the tail of the latency comes from (steady state or a run boundary)."""

    @property
    def p50(self) -> float:
        return percentile(self.samples, 50)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)


@dataclass(frozen=True)
class Overhead:
    """A fixed per-run cost (e.g. spark-submit of an empty range) beside the copy time of a run."""

    what: str
    seconds: float
    copy_seconds: float | None = None


WINDOW_MS = 10_000


def window_p99s(samples: Sequence[tuple[int, int]], window_ms: int = WINDOW_MS) -> tuple[tuple[int, float], ...]:
    """(window start, p99) per `window_ms` of produce time over (produce time, latency) samples, in time order."""
    if not samples:
        return ()
    first = min(sent for sent, _ in samples)
    by_window: dict[int, list[int]] = {}
    for sent, latency in samples:
        by_window.setdefault((sent - first) // window_ms, []).append(latency)
    return tuple((first + k * window_ms, percentile(v, 99)) for k, v in sorted(by_window.items()))


def windows_text(lat: Latency, goal_ms: float = 1000.0) -> str:
    """One line on where a row's p99 comes from: the median window's p99, and every window above `goal_ms` (UTC
    times, to set beside the run boundaries)."""
    if not lat.windows:
        return f"{lat.variant}: no samples"
    p99s = [p for _, p in lat.windows]
    over = [(start, p) for start, p in lat.windows if p > goal_ms]
    stamp = [f"{dt.datetime.fromtimestamp(start / 1000, dt.UTC):%H:%M:%S} {p:,.0f} ms" for start, p in over]
    return (
        f"{lat.variant}: p99 of each {WINDOW_MS // 1000} s window (produce time): median {percentile(p99s, 50):,.0f} "
        f"ms, min {min(p99s):,.0f}, max {max(p99s):,.0f}; {len(over)} of {len(p99s)} windows above "
        f"{goal_ms:,.0f} ms" + (f" (starting {', '.join(stamp)})" if stamp else "")
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default); NaN if empty."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not within 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or the base is not positive."""
    if value is None or base is None or base <= 0:
        return None
    return value / base


def baseline(runs: Iterable[Run], case: str, kind: str, eos: bool | None = None) -> Run | None:
    """The fastest run of `kind` in `case` (with that `eos` when given): the figure ratios are taken against."""
    found = [r for r in runs if r.case == case and r.kind == kind and (eos is None or r.eos == eos)]
    return max(found, key=lambda r: r.throughput, default=None)


def raw_baseline(runs: Iterable[Run], case: str) -> Run | None:
    """The target broker's raw ingest: Kafka's producer performance tool (the bare loop is reported beside)."""
    found = [r for r in runs if r.case == case and r.kind == RAW and r.variant.startswith("ProducerPerformance")]
    return max(found, key=lambda r: r.rate, default=None)


def fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None or math.isnan(value) else pattern.format(value)


HEADER = (
    "case",
    "variant",
    "s",
    "start-up s",
    "records/s",
    "MB/s",
    "steady rec/s",
    "vs MM2",
    "steady vs MM2",
    "vs raw",
    "peak RSS MiB",
    "task RSS MiB",
)


def rows(runs: Sequence[Run]) -> list[tuple[str, ...]]:
    """One row per run; `vs MM2` compares with MM2 of the same guarantee (exactly-once or not), whole runs and
    steady rates (start-up excluded on both sides); `vs raw` compares steady rates with ProducerPerformance."""
    out: list[tuple[str, ...]] = []
    for r in runs:
        mm2 = baseline(runs, r.case, MM2, r.eos) if r.eos is not None else None
        raw = raw_baseline(runs, r.case)
        out.append(
            (
                r.case,
                r.variant,
                f"{r.seconds:.2f}",
                fmt(r.startup_s),
                f"{r.rate:,.0f}",
                f"{r.mb_per_s:.1f}",
                fmt(r.steady_rate, "{:,.0f}"),
                fmt(ratio(r.rate, mm2.rate if mm2 else None)),
                fmt(ratio(r.throughput, mm2.throughput if mm2 else None)),
                fmt(ratio(r.throughput, raw.rate if raw else None)),
                fmt(r.peak_rss_mib, "{:.0f}"),
                fmt(r.task_rss_mib, "{:.0f}"),
            )
        )
    return out


def text_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A fixed-width table for the terminal."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *body, strict=False)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in (header, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def latency_rows(latencies: Sequence[Latency]) -> list[tuple[str, ...]]:
    return [
        (
            lat.case,
            lat.variant,
            f"{lat.target_rate:,.0f}",
            f"{lat.achieved_rate:,.0f}",
            str(len(lat.samples)),
            fmt(lat.p50, "{:.0f}"),
            fmt(lat.p99, "{:.0f}"),
            fmt(float(max(lat.samples)) if lat.samples else None, "{:.0f}"),
        )
        for lat in latencies
    ]


LATENCY_HEADER = ("case", "replicator", "offered rec/s", "produced rec/s", "samples", "p50 ms", "p99 ms", "max ms")


@dataclass(frozen=True)
class Goal:
    text: str
    measured: str
    met: bool | None  # None: not measured in this run


DEPLOYED = "Spark"
FLOW_DAG = "Mirrorflow flow DAG under the scheduler"
"""The latency row of the continuous flow DAG under a real Airflow scheduler (benchmarks/bench_deployed.py)."""
"""Variants whose name holds this run the copy as the Airflow copy task does (a Spark job): the goals' judge."""


def goals(runs: Sequence[Run], latencies: Sequence[Latency], big_record: str = "1KB") -> list[Goal]:
    """The issue's goals on the 1 KB cases, steady rates: judged on the deployed path (the Spark copy job) where
    it was measured, and on the best variant of all (in-process copies included) beside it."""
    out: list[Goal] = []
    cases = sorted({r.case for r in runs if r.case.startswith(big_record)})
    for case in cases:
        for eos in (True, False):
            mm2 = baseline(runs, case, MM2, eos)
            raw = raw_baseline(runs, case)
            label = "exactly-once" if eos else "at-least-once"
            mine = [r for r in runs if r.case == case and r.kind == MIRRORFLOW and r.eos == eos]
            deployed = max((r for r in mine if DEPLOYED in r.variant), key=lambda r: r.throughput, default=None)
            best = max(mine, key=lambda r: r.throughput, default=None)
            judged = [(f"{case} {label}", deployed or best)]
            if deployed is not None and best is not None and best is not deployed:
                judged.append((f"{case} {label}, best variant", best))
            for text, who in judged:
                out += _throughput_goals(text, who, mm2, raw, RAW_GOALS.get(case, 0.7))
    for lat in latencies:
        if lat.variant.startswith("Mirrorflow"):
            out.append(Goal(f"{lat.case} {lat.variant}: p99 ≤ 1 s at half max", f"{lat.p99:.0f} ms", lat.p99 <= 1000))
        if lat.variant.startswith(FLOW_DAG):
            out.append(Goal(f"{lat.case} {lat.variant}: p50 ≤ 200 ms", f"{lat.p50:.0f} ms", lat.p50 <= 200))
            gap = lat.longest_gap_ms
            out.append(
                Goal(
                    f"{lat.case} {lat.variant}: longest gap between arrivals ≤ 1 s",
                    fmt(gap, "{:.0f} ms"),
                    None if gap is None else gap <= 1000,
                )
            )
    rss = [r for r in runs if r.kind == MIRRORFLOW and r.task_rss_mib is not None]
    if rss:
        worst = max(rss, key=lambda r: r.task_rss_mib or 0.0)
        out.append(
            Goal(
                "≤ 512 MB RSS per copy task (largest process running copy tasks)",
                f"{worst.task_rss_mib:.0f} MiB ({worst.case}, {worst.variant})",
                (worst.task_rss_mib or 0.0) <= 512,
            )
        )
    return out


RAW_GOALS = {"1KB x 8p": 0.8}
"""Share of the raw limit (the best point of the tuned ProducerPerformance sweep) per case; 0.7 elsewhere."""


def _throughput_goals(text: str, who: Run | None, mm2: Run | None, raw: Run | None, share: float) -> list[Goal]:
    vs_mm2 = ratio(who.throughput if who else None, mm2.throughput if mm2 else None)
    vs_raw = ratio(who.throughput if who else None, raw.rate if raw else None)
    name = who.variant if who else "-"
    return [
        Goal(f"{text}: throughput ≥ 1.5 × MM2", f"{fmt(vs_mm2)} × ({name})", None if vs_mm2 is None else vs_mm2 >= 1.5),
        Goal(
            f"{text}: throughput ≥ {share} × raw",
            f"{fmt(vs_raw)} × ({name})",
            None if vs_raw is None else vs_raw >= share,
        ),
    ]


def goal_rows(found: Sequence[Goal]) -> list[tuple[str, ...]]:
    verdict = {True: "met", False: "NOT met", None: "not measured"}
    return [(g.text, g.measured, verdict[g.met]) for g in found]


def replace_section(page: str, section: str) -> str:
    """`page` with the text between the BEGIN and END markers replaced by `section` (a `## Results` section
    with the markers is appended when they are missing); everything else is kept as written."""
    if BEGIN not in page or END not in page:
        page = page.rstrip() + f"\n\n## Results\n\n{BEGIN}\n{END}\n"
    head, rest = page.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{section}\n{END}{tail}"


def chart(runs: Sequence[Run], path: Path, title: str) -> None:
    """Grouped horizontal bars: records/s of every variant, one group per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r.case for r in runs))
    variants = list(dict.fromkeys(r.variant for r in runs))
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * max(len(cases), 1), 0.35 * len(variants) + 2), sharey=True)
    axes_list = list(axes) if len(cases) > 1 else [axes]
    colours = {RAW: "#888888", MM2: "#d62728", MIRRORFLOW: "#1f77b4"}
    for ax, case in zip(axes_list, cases, strict=True):
        by_variant = {r.variant: r for r in runs if r.case == case}
        values = [by_variant[v].rate / 1000 if v in by_variant else 0.0 for v in variants]
        kinds = [by_variant[v].kind if v in by_variant else RAW for v in variants]
        ax.barh(range(len(variants)), values, color=[colours.get(k, "#2ca02c") for k in kinds])
        ax.set_title(case, fontsize=10)
        ax.set_xlabel("thousand records/s")
        ax.invert_yaxis()
    axes_list[0].set_yticks(range(len(variants)))
    axes_list[0].set_yticklabels(variants, fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

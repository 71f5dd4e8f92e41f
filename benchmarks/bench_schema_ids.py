"""Per-record cost of schema-ID translation in the copy, with a warm cache, against the same loop without it.

    PYTHONPATH=plugins python benchmarks/bench_schema_ids.py [--records N] [--rounds R]

No broker and no registry: the loop is the per-record Python work of `TargetWriter.forward_transformed` (build
the `Record`, run the chain) and the process-wide cache of the registries' answers is filled first, which is the
state of a copy once its process has seen each schema once (the first record of a schema costs a few registry
round trips in the first copy range of a process, then never again).
Variants, run interleaved in each round, the table shows the median:

- `chain without translation`: an empty step list: the baseline of the transformed path;
- `translation, IDs equal`: the step with the target registry giving the same IDs (no bytes copied);
- `translation, IDs differ`: the step rewriting the 4 ID bytes of every value (and of every second key).

A flow with no registry configured takes the plain copy path and runs none of this (config/schema_registry.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from mirrorflow.core import schema_cache
from mirrorflow.core.predicates import Record
from mirrorflow.core.schema_translation import STEP_NAME, STEP_TYPE, SchemaIdTranslation
from mirrorflow.core.schema_wire import frame
from mirrorflow.core.transforms import ChainSpec, TransformChain, TransformSpec

SETTINGS = {"source.url": "http://source.invalid", "target.url": "http://target.invalid"}
SCHEMAS = 20


def messages(count: int, size: int) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) with keys framed every second record and 20 value schemas."""
    payload = b"x" * (size - 5)
    out = []
    for i in range(count):
        key = frame(1000 + i % 2, b"k%d" % i) if i % 2 else b"plain-%d" % i
        out.append((i, key, frame(1 + i % SCHEMAS, payload)))
    return out


def chain(ids: dict[int, int] | None) -> TransformChain:
    if ids is None:
        return TransformChain(ChainSpec())
    target = f"{SETTINGS['target.url']}/{len(ids)}-{sum(ids.values())}"  # one target registry per variant
    built = TransformChain(
        ChainSpec(transforms=(TransformSpec(STEP_NAME, STEP_TYPE, {**SETTINGS, "target.url": target}),))
    )
    step = built._steps[0][1]
    assert isinstance(step, SchemaIdTranslation)
    subjects = frozenset({"t-key", "t-value"})  # the topic's subjects (TopicNameStrategy)
    for source_id, target_id in ids.items():  # the warm process-wide cache (core/schema_cache.py)
        schema_cache.ID_SUBJECTS.put((SETTINGS["source.url"], source_id), subjects)
        schema_cache.TARGET_IDS.put((SETTINGS["source.url"], target, source_id), (target_id, subjects))
    return built


def per_record_ns(run: TransformChain, batch: list[tuple[int, bytes, bytes]]) -> float:
    """The loop body of forward_transformed, minus the produce call (identical in every variant)."""
    apply: Callable[[Record], Record | None] = run.apply
    started = time.perf_counter_ns()
    for offset, key, value in batch:
        out = apply(Record("A.t", "t", 0, offset, 1_600_000_000_000, key, value, []))
        assert out is not None
    return (time.perf_counter_ns() - started) / len(batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1024, 10240], help="value bytes")
    args = parser.parse_args(argv)
    same = {i: i for i in [*range(1, SCHEMAS + 1), 1000, 1001]}
    moved = {i: i + 7 for i in same}
    variants = {"chain without translation": None, "translation, IDs equal": same, "translation, IDs differ": moved}
    print(f"{args.records} records per round, median of {args.rounds} rounds; ns per record (Python loop only)")
    print("| value bytes | " + " | ".join(variants) + " | added by translation (IDs differ) |")
    print("|---:|" + "---:|" * (len(variants) + 1))
    for size in args.sizes:
        batch = messages(args.records, size)
        chains = {name: chain(ids) for name, ids in variants.items()}
        per_record_ns(chains["translation, IDs differ"], batch[:1000])  # warm-up
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, run in chains.items():
                times[name].append(per_record_ns(run, batch))
        medians = {name: statistics.median(values) for name, values in times.items()}
        added = medians["translation, IDs differ"] - medians["chain without translation"]
        cells = " | ".join(f"{m:,.0f}" for m in medians.values())
        print(f"| {size} | {cells} | +{added:,.0f} ns |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

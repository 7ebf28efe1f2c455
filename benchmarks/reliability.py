"""The reliability campaign (issue 8), at full size; ``tests/reliability`` runs it small.

Sections (each prints what it tried and what failed; the summary table ends the run):

    exactly-once    hypothesis over random orders (shuffle, mix with schedules, concat,
                    repeat, cycle_to, take/skip, step_by) x shards (every i of k) x
                    resume points (chains of state_dict -> fresh loader) x elastic
                    resumes; in process, and with 2 workers
    writer-kills    SIGKILL at random moments of .flr (columns, streamed) and .nndataset
                    writes: the target is the old file or the new one, never partial;
                    the killed writers' leftover temporaries are counted
    worker-kills    SIGKILL of a loader worker (busy, idle, between passes): WorkerError,
                    the time it took, shared memory and processes left
    fuzz            benchmarks/fuzz_formats.py (corrupted .ndf, .flr, .nndataset)
    soak            epochs of a scheduled, shuffled mix with 2 workers: memory,
                    descriptors, shared memory
    states          tampered and random-mutated loader states: StateError, loader unchanged

    python benchmarks/reliability.py                      # the full campaign (~5 min)
    python benchmarks/reliability.py --cases 500 --worker-cases 5 --kills 5 \\
        --worker-kills 6 --fuzz-cases 2000 --soak-epochs 40 --state-mutations 1000
    python benchmarks/reliability.py --only exactly-once,states

Exit status 1 when anything failed (known bugs included: see the failures printed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the campaign's cases live in tests/reliability

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from tests.reliability import exactly_once, killing, soak, states, workers  # noqa: E402
from tests.reliability.fuzzing import fuzz_formats  # noqa: E402

SECTIONS = ("exactly-once", "writer-kills", "worker-kills", "fuzz", "soak", "states")


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple[str, int, int, str]] = []

    def add(self, section: str, tried: int, failed: int, note: str = "") -> None:
        self.rows.append((section, tried, failed, note))
        print(f"== {section}: {tried} tried, {failed} failed {note}", flush=True)

    def table(self) -> str:
        lines = [f"{'section':<28} {'tried':>9} {'failed':>7}  notes"]
        lines += [f"{s:<28} {t:>9} {f:>7}  {n}" for s, t, f, n in self.rows]
        return "\n".join(lines)


def show(failures: list, limit: int = 5) -> None:
    for f in failures[:limit]:
        print(f"    FAILED: {f}")
    if len(failures) > limit:
        print(f"    ... and {len(failures) - limit} more")


# -- exactly once ------------------------------------------------------------------------------


def run_exactly_once(report: Report, count: int, workers_: int, seed: int) -> None:
    if count <= 0:
        return
    stats: Counter = Counter()
    failures: list[str] = []
    check = exactly_once.check_workers_case if workers_ else exactly_once.check_case

    @hypothesis_seed(seed)
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(exactly_once.cases(workers=workers_))
    def campaign(case: exactly_once.Case) -> None:
        stats["tried"] += 1
        try:
            stats.update(check(case))
        except Exception as e:  # counted and shown, the campaign goes on
            failures.append(f"{type(e).__name__}: {str(e)[:300]} in {case!r}"[:1200])

    t = time.perf_counter()
    campaign()
    label = "exactly-once, 2 workers" if workers_ else "exactly-once, in process"
    note = (
        f"({time.perf_counter() - t:.0f} s; batches {stats['batches']}, resumes "
        f"{stats['resumes']}, shard loaders {stats['shards']}, elastic resumes "
        f"{stats['elastic resumes']})"
    )
    show(failures)
    report.add(label, stats["tried"], len(failures), note)


# -- writers killed --------------------------------------------------------------------------


def run_writer_kills(report: Report, kills: int, seed: int) -> None:
    if kills <= 0:
        return
    rng = random.Random(seed)
    for kind in killing.KINDS:
        outcomes: Counter = Counter()
        leftovers: Counter = Counter()
        failures: list[str] = []
        leftover_bytes = 0
        t = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="reliability-kills-") as tmp:
            refs, work = Path(tmp) / "refs", Path(tmp) / "work"
            refs.mkdir()
            work.mkdir()
            size = killing.SIZES[kind]
            old = killing.reference(kind, refs, 1, size // 2)
            new = killing.reference(kind, refs, 2, size)
            target = work / ("data.flr" if kind.startswith("flr") else "data.nndataset")
            seconds = killing.child_write_time(kind, target, 2, size)
            for k in range(kills):
                fresh = k % 5 == 4  # every fifth kill: no old file
                if fresh:
                    target.unlink(missing_ok=True)
                else:
                    killing.prepare(kind, 1, size // 2)(target)
                delay = rng.uniform(0, 1.25 * seconds)
                try:
                    killed = killing.kill_writer(kind, target, 2, size, delay)
                    o = killing.classify(kind, target, None if fresh else old, new, killed)
                except AssertionError as e:
                    failures.append(f"delay {delay * 1e3:.1f} ms: {e}")
                    for p in work.iterdir():
                        p.unlink()
                    continue
                outcomes[("killed" if o.killed else "finished first", o.target)] += 1
                leftovers.update(name.rsplit(".", 1)[-1] for name in o.leftovers)
                leftover_bytes += o.leftover_bytes
                killing.remove_leftovers(o, work)
        print(
            f"  {kind}: a write takes {seconds * 1e3:.0f} ms in the child; outcomes "
            f"{dict(outcomes)}; leftovers {dict(leftovers)} ({leftover_bytes / 2**20:.0f} MiB "
            f"in all, hidden, named after the target)"
        )
        show(failures)
        report.add(
            f"writer kills, {kind}",
            kills,
            len(failures),
            f"({time.perf_counter() - t:.0f} s; "
            + ", ".join(f"{a}/{b} {n}" for (a, b), n in sorted(outcomes.items()))
            + ")",
        )


# -- workers killed --------------------------------------------------------------------------


def run_worker_kills(report: Report, kills: int, seed: int) -> None:
    if kills <= 0:
        return
    rng = random.Random(seed)
    by_moment: dict[str, Counter] = {m: Counter() for m in workers.MOMENTS}
    slowest = dict.fromkeys(workers.MOMENTS, 0.0)
    failures: list[str] = []
    t = time.perf_counter()
    for k in range(kills):
        moment = workers.MOMENTS[k % len(workers.MOMENTS)]
        before, which = rng.randrange(0, 40), rng.randrange(2)
        try:
            r = workers.kill_one(before, which, moment)
        except Exception as e:
            failures.append(
                f"{moment} after {before} batches, worker {which}: {type(e).__name__}: {e}"
            )
            continue
        by_moment[moment][r.raised or "nothing"] += 1
        slowest[moment] = max(slowest[moment], r.seconds)
        if r.raised != "WorkerError" or r.segments_left or r.workers_left:
            failures.append(f"{moment} after {before} batches, worker {which}: {r}")
    for m in workers.MOMENTS:
        print(
            f"  {m}: {dict(by_moment[m])}; slowest error {slowest[m] * 1e3:.1f} ms after the kill"
        )
    show(failures)
    report.add(
        "worker kills",
        kills,
        len(failures),
        f"({time.perf_counter() - t:.0f} s; slowest WorkerError "
        f"{max(slowest.values()) * 1e3:.0f} ms after the kill)",
    )


# -- corrupted files ----------------------------------------------------------------------------


def run_fuzz(report: Report, cases: int, seed: int) -> None:
    if cases <= 0:
        return
    out = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out):
        status = fuzz_formats().main(["--cases", str(cases), "--seed", str(seed)])
    text = out.getvalue()
    print(text, end="")
    for fmt, n, other in re.findall(r"^(\w+): (\d+) cases .* other (\d+)$", text, re.M):
        report.add(f"fuzz, {fmt}", int(n), int(other), "(benchmarks/fuzz_formats.py)")
    if status:
        print("  fuzz_formats.py reported failures")
    print(f"  ({time.perf_counter() - t:.0f} s)")


# -- soak ---------------------------------------------------------------------------------------


def run_soak(report: Report, epochs: int) -> None:
    if epochs <= 1:
        return
    t = time.perf_counter()
    s = soak.run(epochs)
    problems = []
    if s.growth(s.rss) > 0.05:
        problems.append(f"RSS grew {s.growth(s.rss):.1%} after the first epoch")
    if len(set(s.fds)) != 1:
        problems.append(f"descriptors {min(s.fds)}..{max(s.fds)}")
    if len(set(s.segments)) != 1:
        problems.append("the loader's shared-memory segments changed")
    if len(set(s.worker_pids)) != 1:
        problems.append("workers were restarted")
    if s.growth(s.worker_rss) > 0.05:
        problems.append(f"worker RSS grew {s.growth(s.worker_rss):.1%}")
    if len(set(s.worker_fds)) != 1:
        problems.append(f"worker descriptors {min(s.worker_fds)}..{max(s.worker_fds)}")
    if s.segments_left:
        problems.append(f"{s.segments_left} segments left after close")
    if s.fds_after_close != s.fds_before:
        problems.append(f"descriptors {s.fds_before} before, {s.fds_after_close} after close")
    print(
        f"  {epochs} epochs, {s.batches} batches: RSS {s.rss[0] / 2**20:.1f} MiB after epoch 1, "
        f"max {max(s.rss) / 2**20:.1f} MiB ({s.growth(s.rss):+.2%}); descriptors "
        f"{sorted(set(s.fds))}; segments {len(s.segments[0])} throughout, "
        f"{s.segments_left} after close; workers' RSS {s.worker_rss[0] / 2**20:.1f} MiB, "
        f"growth {s.growth(s.worker_rss):+.2%}; workers' descriptors {sorted(set(s.worker_fds))}"
    )
    show(problems)
    report.add(
        "soak",
        epochs,
        len(problems),
        f"({time.perf_counter() - t:.0f} s; epochs, RSS growth {s.growth(s.rss):+.2%})",
    )


# -- states -------------------------------------------------------------------------------------


def run_states(report: Report, mutations: int, seed: int) -> None:
    if mutations <= 0:
        return
    t = time.perf_counter()
    failures = []
    tried = 0
    for kind, table in (("mix", states.INVALID), ("shard", states.INVALID_SHARDED)):
        state, want = states.saved(kind)
        with states.started(kind) as target:
            variants = [
                *(c(state) for c in table.values()),
                *states.fingerprint_variants(state),
                *states.truncations(state),
            ]
            for bad in variants:
                tried += 1
                ok, what = states.refuses(target, bad)
                if not ok:
                    failures.append(f"{kind}: {bad!r}: {what}")
            if states.rest(target) == want:
                continue
            failures.append(f"{kind}: the loader's stream changed after the refusals")
    show(failures)
    report.add("states, tampered fields", tried, len(failures))
    for kind in states.KINDS:
        counts, failed = states.mutations(mutations, seed, kind)
        print(f"  {kind}: {dict(counts)}")
        for outcome in sorted({o for _, o, _ in failed}):
            print(f"    {outcome}, e.g.:")
            show([what for _, o, what in failed if o == outcome], 2)
        report.add(
            f"states, mutated ({kind})",
            mutations,
            len(failed),
            f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})",
        )
    print(f"  ({time.perf_counter() - t:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=3000, help="exactly-once cases in process")
    parser.add_argument(
        "--worker-cases",
        type=int,
        default=30,
        help="exactly-once cases with 2 workers (about 1 s each)",
    )
    parser.add_argument("--kills", type=int, default=30, help="writer kills per kind of file")
    parser.add_argument("--worker-kills", type=int, default=30, help="workers killed")
    parser.add_argument(
        "--fuzz-cases", type=int, default=100_000, help="fuzz_formats.py cases per format"
    )
    parser.add_argument("--soak-epochs", type=int, default=200, help="soak epochs")
    parser.add_argument(
        "--state-mutations",
        type=int,
        default=10_000,
        help="random mutations of a saved state, per kind of loader",
    )
    parser.add_argument("--seed", type=int, default=1, help="the campaign's seed")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections: {', '.join(SECTIONS)}",
    )
    args = parser.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    if only - set(SECTIONS):
        parser.error(f"unknown sections {sorted(only - set(SECTIONS))}")
    report = Report()
    t = time.perf_counter()
    steps = [
        ("exactly-once", lambda: run_exactly_once(report, args.cases, 0, args.seed)),
        ("exactly-once", lambda: run_exactly_once(report, args.worker_cases, 2, args.seed)),
        ("writer-kills", lambda: run_writer_kills(report, args.kills, args.seed)),
        ("worker-kills", lambda: run_worker_kills(report, args.worker_kills, args.seed)),
        ("fuzz", lambda: run_fuzz(report, args.fuzz_cases, args.seed)),
        ("soak", lambda: run_soak(report, args.soak_epochs)),
        ("states", lambda: run_states(report, args.state_mutations, args.seed)),
    ]
    for section, step in steps:
        if section in only:
            print(f"-- {section}", flush=True)
            try:
                step()
            except Exception:  # a section that cannot run is a failure of the campaign
                traceback.print_exc()
                report.add(f"{section} (crashed)", 0, 1)
    print(f"\n{report.table()}\n({time.perf_counter() - t:.0f} s in all)")
    return 1 if any(f for _, _, f, _ in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""Performance targets as data, and their evaluation over a run's records.

A benchmark declares its family's targets with these kinds (the values are
the family's); `evaluate` turns records into one verdict per target:
{target, status: PASS | FAIL | INCOMPLETE | N/A, detail}. The first verdict
is always "ours correct and timed in every case".

- AnchorBand          ours <= best anchor x band at every case
- PctFloorAtLeast     ours >= pct % of floor where a case condition holds
- TimeAtMost          ours' median <= a limit (per case) where a condition holds
- PctFloorVsReference ours' % of floor in other values of a field (dtype) at
                      least that of the reference value's same case, minus a band
- SpeedupAtLeast      at one case: ours >= factor x another implementation
- TimeAtMostAt        at one case: ours' median <= a limit
- MetricAtLeast       ours' record field (e.g. pct_ceiling) >= a value where a
                      case condition holds
- SpeedupWhere        ours >= factor x each named implementation (e.g. cuBLAS
                      bf16, Marlin) at every case where a condition holds
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks.common.tables import (
    CaseRecords,
    best_anchor,
    case_of,
    cell,
    fmt,
    records_by_case,
)

Case = dict[str, Any]
Verdict = dict[str, Any]


@dataclass(frozen=True)
class Context:
    cases: CaseRecords
    case_fields: Sequence[str]
    label: Callable[[Case], str]
    anchors: Sequence[str]

    def items(self) -> list[tuple[Case, dict[str, dict[str, Any]]]]:
        return [(case_of(k, self.case_fields), by) for k, by in self.cases.items()]

    def find(self, case: Case) -> dict[str, dict[str, Any]] | None:
        return self.cases.get(tuple(case.get(f) for f in self.case_fields))


class Target(Protocol):
    def evaluate(self, ctx: Context) -> Verdict: ...


def _counted(n: int, fails: list[str], shown: int) -> str:
    return f"{n - len(fails)}/{n} cases pass" + (
        "; " + "; ".join(fails[:shown]) if fails else ""
    )


def _status(fails: list[str], n: int) -> str:
    return "FAIL" if fails else ("PASS" if n else "N/A")


def correct_everywhere(ctx: Context) -> Verdict:
    ours_bad = [
        f"{ctx.label(case)}: {by['ours']['status']} ({by['ours'].get('reason', '')})"
        for case, by in ctx.items()
        if "ours" in by and by["ours"]["status"] not in ("ok", "skipped")
    ]
    n_ours = sum(1 for by in ctx.cases.values() if "ours" in by)
    n_skip = sum(
        1
        for by in ctx.cases.values()
        if "ours" in by and by["ours"]["status"] == "skipped"
    )
    if n_skip and not ours_bad:
        ours_bad_status = "INCOMPLETE"
        ours_bad = [f"{n_skip} cases skipped (time budget)"]
    else:
        ours_bad_status = "FAIL"
    return {
        "target": "ours correct (FP32 reference) and timed in every case",
        "status": ours_bad_status if ours_bad else ("PASS" if n_ours else "N/A"),
        "detail": (
            "; ".join(ours_bad[:6])
            + (f" (+{len(ours_bad) - 6} more)" if len(ours_bad) > 6 else "")
        )
        if ours_bad
        else f"{n_ours} cases",
    }


@dataclass(frozen=True)
class AnchorBand:
    target: str
    band: float  # ours <= best anchor * band

    def evaluate(self, ctx: Context) -> Verdict:
        anchors_seen: dict[str, list[str]] = {a: [] for a in ctx.anchors}
        for by in ctx.cases.values():
            for a in ctx.anchors:
                if a in by:
                    anchors_seen[a].append(by[a]["status"])
        never_ok = [
            f"{a} ({'/'.join(sorted(set(st)))})"
            for a, st in anchors_seen.items()
            if st and "ok" not in st
        ]
        absent = [f"{a} (not in this run)" for a, st in anchors_seen.items() if not st]
        fails, n = [], 0
        for case, by in ctx.items():
            o, best = by.get("ours"), best_anchor(by, ctx.anchors)
            if not o or o.get("median_us") is None or best is None:
                continue
            n += 1
            if not (
                o["status"] == "ok" and o["median_us"] <= best["median_us"] * self.band
            ):
                fails.append(
                    f"{ctx.label(case)}: ours {o['median_us']:.2f} vs {best['impl']} "
                    f"{best['median_us']:.2f} ({(o['median_us'] / best['median_us'] - 1) * 100:+.1f}%)"
                )
        status = _status(fails, n)
        incomplete = never_ok + absent
        if status == "PASS" and incomplete:
            status = "INCOMPLETE"
        return {
            "target": self.target,
            "status": status,
            "detail": f"{n - len(fails)}/{n} cases pass"
            + (
                f"; anchors never measured ok: {', '.join(incomplete)}"
                if incomplete
                else ""
            )
            + (
                "; "
                + "; ".join(fails[:8])
                + (f" (+{len(fails) - 8} more)" if len(fails) > 8 else "")
                if fails
                else ""
            ),
        }


def _each_case(
    ctx: Context,
    where: Callable[[Case], bool],
    needs: str,
    failure: Callable[[Case, dict[str, Any]], str | None],
) -> Verdict:
    """Ours' record of every case where `where` holds and `needs` was measured:
    the counts and the failures (`failure` returns why, or None)."""
    fails, n = [], 0
    for case, by in ctx.items():
        o = by.get("ours")
        if not where(case) or not o or o.get(needs) is None:
            continue
        n += 1
        why = failure(case, o)
        if why is not None:
            fails.append(f"{ctx.label(case)}: {why}")
    return {"status": _status(fails, n), "detail": _counted(n, fails, 10)}


@dataclass(frozen=True)
class PctFloorAtLeast:
    target: str
    pct: float
    where: Callable[[Case], bool]

    def evaluate(self, ctx: Context) -> Verdict:
        def failure(case: Case, o: dict[str, Any]) -> str | None:
            if o["pct_floor"] >= self.pct:
                return None
            return (
                f"{o['pct_floor']:.1f}% "
                f"({o['median_us']:.2f} vs floor {o['floor_us']:.2f})"
            )

        return {
            "target": self.target,
            **_each_case(ctx, self.where, "pct_floor", failure),
        }


@dataclass(frozen=True)
class TimeAtMost:
    target: str
    limit_us: Callable[[Case], float]
    where: Callable[[Case], bool]

    def evaluate(self, ctx: Context) -> Verdict:
        def failure(case: Case, o: dict[str, Any]) -> str | None:
            lim = self.limit_us(case)
            return f"{o['median_us']:.2f} > {lim}" if o["median_us"] > lim else None

        return {
            "target": self.target,
            **_each_case(ctx, self.where, "median_us", failure),
        }


@dataclass(frozen=True)
class PctFloorVsReference:
    target: str
    field: str  # e.g. "dtype"
    reference: Any  # e.g. "bf16"
    band: float  # percentage points
    missing: str  # the detail when no pair of cases is in the records

    def evaluate(self, ctx: Context) -> Verdict:
        fails, n = [], 0
        for case, by in ctx.items():
            if case[self.field] == self.reference:
                continue
            o = by.get("ours")
            ref = ctx.find({**case, self.field: self.reference}) or {}
            b = ref.get("ours")
            if (
                not o
                or not b
                or o.get("pct_floor") is None
                or b.get("pct_floor") is None
            ):
                continue
            n += 1
            if o["pct_floor"] < b["pct_floor"] - self.band:
                fails.append(
                    f"{ctx.label(case)}: {o['pct_floor']:.1f}% < {self.reference} {b['pct_floor']:.1f}%"
                )
        return {
            "target": self.target,
            "status": _status(fails, n),
            "detail": (f"{n - len(fails)}/{n} cases pass" if n else self.missing)
            + ("; " + "; ".join(fails[:10]) if fails else ""),
        }


@dataclass(frozen=True)
class SpeedupAtLeast:
    target: str
    case: Case
    other: str  # implementation ours is compared with
    other_label: str  # its name in the detail
    factor: float

    def evaluate(self, ctx: Context) -> Verdict:
        by = ctx.find(self.case)
        if not by or "ours" not in by or self.other not in by:
            return {
                "target": self.target,
                "status": "N/A",
                "detail": "shape or impl not in this run",
            }
        o, v = by["ours"], by[self.other]
        if o.get("median_us") and v.get("median_us") and v["status"] == "ok":
            sp = v["median_us"] / o["median_us"]
            return {
                "target": self.target,
                "status": "PASS"
                if sp >= self.factor and o["status"] == "ok"
                else "FAIL",
                "detail": f"ours {o['median_us']:.1f} us ({fmt(o.get('gbps'), '.1f')} GB/s) vs "
                f"{self.other_label} {v['median_us']:.1f} us ({fmt(v.get('gbps'), '.1f')} GB/s): "
                f"{sp:.2f}x",
            }
        return {
            "target": self.target,
            "status": "INCOMPLETE",
            "detail": f"ours {o['status']}, {self.other} {v['status']}: "
            f"{v.get('reason') or o.get('reason')}",
        }


@dataclass(frozen=True)
class TimeAtMostAt:
    target: str
    case: Case
    limit_us: float
    other: str  # shown beside ours when measured
    other_label: str

    def evaluate(self, ctx: Context) -> Verdict:
        by = ctx.find(self.case)
        o = by.get("ours") if by else None
        if by is None or o is None or o.get("median_us") is None:
            return {"target": self.target, "status": "N/A", "detail": "not measured"}
        v = by.get(self.other)
        vs = f" ({self.other_label} {cell(v)} us)" if v else ""
        return {
            "target": self.target,
            "status": "PASS"
            if o["median_us"] <= self.limit_us and o["status"] == "ok"
            else "FAIL",
            "detail": f"ours {o['median_us']:.2f} us{vs}",
        }


@dataclass(frozen=True)
class MetricAtLeast:
    target: str
    metric: str  # a record field, e.g. "pct_ceiling"
    value: float
    where: Callable[[Case], bool]

    def evaluate(self, ctx: Context) -> Verdict:
        def failure(case: Case, o: dict[str, Any]) -> str | None:
            if o[self.metric] >= self.value and o["status"] == "ok":
                return None
            return f"{self.metric} {o[self.metric]:.1f} ({o['median_us']:.2f} us, {o['status']})"

        return {
            "target": self.target,
            **_each_case(ctx, self.where, self.metric, failure),
        }


@dataclass(frozen=True)
class SpeedupWhere:
    target: str
    others: Sequence[str]  # implementations ours is compared with
    factor: float  # ours' speedup (other time / ours time) must be >= this
    where: Callable[[Case], bool]

    def evaluate(self, ctx: Context) -> Verdict:
        fails, n, unmeasured = [], 0, set()
        for case, by in ctx.items():
            o = by.get("ours")
            if not self.where(case) or not o or o.get("median_us") is None:
                continue
            for name in self.others:
                v = by.get(name)
                if not v or v["status"] != "ok" or not v.get("median_us"):
                    unmeasured.add(name)
                    continue
                n += 1
                sp = v["median_us"] / o["median_us"]
                if sp < self.factor or o["status"] != "ok":
                    fails.append(
                        f"{ctx.label(case)}: ours {o['median_us']:.2f} vs {name} "
                        f"{v['median_us']:.2f} ({sp:.2f}x)"
                    )
        status = _status(fails, n)
        if status != "FAIL" and unmeasured:
            status = "INCOMPLETE"
        detail = _counted(n, fails, 10)
        if unmeasured:
            detail += f"; not measured ok somewhere: {', '.join(sorted(unmeasured))}"
        return {"target": self.target, "status": status, "detail": detail}


def evaluate(
    records: Sequence[dict[str, Any]],
    targets: Sequence[Target],
    *,
    case_fields: Sequence[str],
    label: Callable[[Case], str],
    anchors: Sequence[str],
) -> list[Verdict]:
    """Correctness first, then one verdict per target, in order."""
    ctx = Context(records_by_case(records, case_fields), case_fields, label, anchors)
    return [correct_everywhere(ctx), *(t.evaluate(ctx) for t in targets)]

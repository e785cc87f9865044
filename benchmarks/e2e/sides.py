# SPDX-License-Identifier: Apache-2.0
"""The "sides" of the serving benchmark: each side is one vLLM server
configuration (a name, its vLLM arguments and environment, which model
variant it serves, which of our op families it runs), compared side by side.

Built-in sides (``--sides a,b,c``; the default ``myops,native`` is the
RMSNorm comparison the benchmark always made):

- ``myops`` / ``native``: our RMSNorm vs vLLM's (``--ir-op-priority``).
- ``bf16``: the unquantized model, vLLM's own GEMMs.
- ``w4a16``: ``--quantization myops_w4a16`` (online RTN at load).
- ``gptq_marlin``: a GPTQ-format model (the preset's ``gptq`` variant),
  ``--quantization gptq_marlin --linear-backend marlin``: vLLM's Marlin
  kernel (vLLM would pick Machete on sm_90 by itself; ``gptq_vllm`` is that
  choice). Its start-up log must name the kernel vLLM chose.
- ``custom_attn`` / ``flash_attn``: ``--attention-backend CUSTOM`` (ours)
  vs ``FLASH_ATTN``.

Every side but ``myops`` serves vLLM's native RMSNorm, so two sides differ
in the one backend under comparison. More sides: ``--define-side`` with a
JSON object of the Side fields.

Evidence rules (``evidence``): a side must show our counters for each family
it claims (every counted call of the family on myops, none elsewhere) and
none on myops for every other family; for a family that is not its own and
that vLLM also runs natively (RMSNorm), native calls must be counted, so the
counters were live. Its ``expect_log`` patterns must match the server log.

Order (``interleaved_order``): round i runs the sides forward when i is even
and backward when odd (ABBA for two sides, ABC CBA for three), so a linear
drift of a shared machine hits every side alike over two rounds.

Data and rules only: importing this module starts no server and imports
neither torch nor vLLM.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from vllm_myops import ops

BASE = "base"  # the preset's model as is
GPTQ = "gptq"  # the preset's GPTQ-format variant
MODEL_VARIANTS = (BASE, GPTQ)
DEFAULT_SIDES = ("myops", "native")


@dataclass(frozen=True)
class Side:
    name: str
    vllm_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # Provider of the vllm.ir ops (RMSNorm): ops.PROVIDER or ops.NATIVE.
    norms: str = ops.NATIVE
    model: str = BASE  # one of MODEL_VARIANTS
    # Families (ops.FAMILIES names) this side runs on our kernels.
    ours: frozenset[str] = frozenset()
    # Regexes the server log must match (what vLLM chose, where no counter
    # of ours can tell).
    expect_log: tuple[str, ...] = ()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


BUILTIN: dict[str, Side] = {
    s.name: s
    for s in (
        Side("myops", norms=ops.PROVIDER, ours=frozenset({"layernorm"})),
        Side("native"),
        Side("bf16"),
        Side(
            "w4a16",
            ("--quantization", "myops_w4a16"),
            ours=frozenset({"quantization"}),
        ),
        Side(
            "gptq_marlin",
            ("--quantization", "gptq_marlin", "--linear-backend", "marlin"),
            model=GPTQ,
            expect_log=(r"Using MarlinLinearKernel for \w*GPTQ\w*LinearMethod",),
        ),
        Side(
            "gptq_vllm",
            ("--quantization", "gptq"),
            model=GPTQ,
            expect_log=(r"Using \w+ for \w*GPTQ\w*LinearMethod",),
        ),
        Side(
            "custom_attn",
            ("--attention-backend", "CUSTOM"),
            ours=frozenset({"attention"}),
        ),
        Side(
            "flash_attn",
            ("--attention-backend", "FLASH_ATTN"),
            expect_log=(r"Using \S*FLASH_ATTN backend",),
        ),
    )
}


def side_from_json(text: str) -> Side:
    """A Side from ``{"name": ..., "vllm_args": [...], "env": {...},
    "norms": "native", "model": "base", "ours": [...], "expect_log": [...]}``
    (only ``name`` is required)."""
    d = json.loads(text)
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise ValueError(f"a side definition is a JSON object with a name: {text!r}")
    known = set(Side.__dataclass_fields__)
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"side {d['name']!r}: unknown fields {sorted(unknown)}")
    side = Side(
        name=d["name"],
        vllm_args=tuple(str(a) for a in d.get("vllm_args", ())),
        env=tuple(sorted((str(k), str(v)) for k, v in d.get("env", {}).items())),
        norms=d.get("norms", ops.NATIVE),
        model=d.get("model", BASE),
        ours=frozenset(d.get("ours", ())),
        expect_log=tuple(d.get("expect_log", ())),
    )
    _validate(side)
    return side


def _validate(side: Side) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", side.name):
        raise ValueError(f"side name {side.name!r}: letters, digits, _ . - only")
    if side.norms not in (ops.PROVIDER, ops.NATIVE):
        raise ValueError(f"side {side.name!r}: norms must be myops or native")
    if side.model not in MODEL_VARIANTS:
        raise ValueError(f"side {side.name!r}: model must be one of {MODEL_VARIANTS}")
    families = {f.name for f in ops.FAMILIES}
    if not side.ours <= families:
        raise ValueError(
            f"side {side.name!r}: unknown families {sorted(side.ours - families)}"
        )
    if ("layernorm" in side.ours) != (side.norms == ops.PROVIDER):
        raise ValueError(
            f"side {side.name!r}: runs our RMSNorm exactly when norms is myops"
        )
    for pattern in side.expect_log:
        re.compile(pattern)


def parse_sides(spec: str, defined: list[Side] | None = None) -> list[Side]:
    """``a,b,c`` -> the Sides of those names (defined ones first, then the
    built-in ones), in that order, each once."""
    table = dict(BUILTIN)
    for s in defined or []:
        table[s.name] = s
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError("no side named (--sides a,b,...)")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"sides named twice: {dup}")
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown sides {unknown} (known: {', '.join(sorted(table))})")
    return [table[n] for n in names]


def interleaved_order(sides: list[Side], repeats: int) -> list[Side]:
    """Server order: forward in even rounds, backward in odd ones."""
    order: list[Side] = []
    for i in range(repeats):
        order += sides if i % 2 == 0 else sides[::-1]
    return order


def _family_counts(stats: dict[str, Any], family: str) -> tuple[int, int, int]:
    """(calls on myops, calls on providers other than myops, of which native)
    of one family, eager/compiled and captured in CUDA graphs together."""
    mine = other = native = 0
    for spec in ops.ops_of(family):
        for table in (stats.get("calls") or {}, stats.get("graph_captured") or {}):
            per = table.get(spec.name, {})
            for provider, n in per.items():
                if provider == ops.PROVIDER:
                    mine += n
                else:
                    other += n
                    native += n if provider == ops.NATIVE else 0
    return mine, other, native


def evidence(side: Side, stats: dict[str, Any], log_text: str) -> list[str]:
    """What is wrong with a server run of `side` ([] when nothing is):
    `stats` has the counters' "calls" and "graph_captured" tables, `log_text`
    is the server's log."""
    problems = []
    for family in ops.FAMILIES:
        mine, other, native = _family_counts(stats, family.name)
        has_native = any(ops.NATIVE in o.providers for o in ops.ops_of(family.name))
        if family.name in side.ours:
            if mine == 0 or other:
                problems.append(
                    f"{family.title}: {mine} calls on myops, {other} elsewhere "
                    "(ours must run every call)"
                )
        elif mine:
            problems.append(f"{family.title}: {mine} calls on myops (must be none)")
        elif has_native and native == 0:
            problems.append(f"{family.title}: no native call counted (counters off?)")
    for pattern in side.expect_log:
        if not re.search(pattern, log_text):
            problems.append(f"server log has no line matching {pattern!r}")
    return problems


def matched_log_lines(side: Side, log_text: str, limit: int = 4) -> list[str]:
    """The log lines that matched the side's patterns (for the JSON)."""
    lines = []
    for line in log_text.splitlines():
        if any(re.search(p, line) for p in side.expect_log):
            lines.append(line.strip()[-240:])
            if len(lines) >= limit:
                break
    return lines


# What vLLM logs about its own choices (attention backend, quantized linear
# kernel, FlashAttention version), kept per server in the JSON for every side.
CHOICE_LOG = re.compile(
    r"Using \S+ (attention )?backend|Using \w+ for \w+LinearMethod|"
    r"FlashAttention version|[Uu]sing FlashAttention"
)


def choice_lines(log_text: str, limit: int = 12) -> list[str]:
    """The server log's lines about vLLM's kernel choices, each once."""
    seen: dict[str, None] = {}
    for line in log_text.splitlines():
        if CHOICE_LOG.search(line):
            # Drop the "(EngineCore pid=...) INFO 12-02 00:56:46 [file:line]" head.
            text = re.sub(r"^.*?\[[\w.]+:\d+\]\s*", "", line.strip())[-240:]
            seen.setdefault(text)
            if len(seen) >= limit:
                break
    return list(seen)


def as_dict(side: Side) -> dict[str, Any]:
    return {
        "name": side.name,
        "vllm_args": list(side.vllm_args),
        "env": side.env_dict(),
        "norms": side.norms,
        "model": side.model,
        "ours": sorted(side.ours),
        "expect_log": list(side.expect_log),
    }

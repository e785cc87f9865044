#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Validates the Buildkite pipeline in .buildkite/ (vLLM's format).

Checks, each reported with the file and step it concerns:

- ``.buildkite/ci_config.yaml`` parses; its keys are the ones vLLM's
  ci-infra generator reads (name, job_dirs, run_all_patterns,
  run_all_exclude_patterns, ...); every job dir exists; every pattern is a
  valid regular expression.
- every ``*.yaml`` under the job dirs parses; top-level keys are group /
  depends_on / steps; each step's fields are from the generator's step model
  (label, key, commands, device, num_devices, source_file_dependencies,
  timeout_in_minutes, parallelism, ...) with the right types; keys are unique
  and well formed; depends_on names existing keys; devices are known queues;
  parallel steps use the shard variables.
- every path in ``source_file_dependencies`` (a leading ``!`` excludes)
  exists in the repo as a file, a directory or a path prefix.
- every repo file a command names exists (scripts, test files and dirs,
  ``--compare``/``--config-list-file`` inputs, ``python -m`` modules of the
  repo's packages), relative to the step's working_dir; outputs (``--save``,
  ``-o``, ``--junitxml``, redirections) and absolute or ``$VAR`` paths are not
  checked.
- ``--compare-baseline NAME`` (the benchmarks' gate by name) has its file,
  ``benchmarks/results/baselines/<device>/NAME.json``, for the step's agent
  queue (``h200``, ``h200_18gb`` -> h200; ``h100`` -> h100; no GPU -> cpu).
- lm-eval config lists named by ``--config-list-file`` exist and each config
  has vLLM's lm-eval-harness schema (model_name, tasks -> name, metrics ->
  name/value, limit, num_fewshot, optional rtol).

    python -m tools.ci.buildkite.validate_pipeline [--root DIR] [--quiet]

Exit status 0 when valid, 1 with one line per problem otherwise.
``load_pipeline`` is shared with tools.ci.buildkite.triggered_steps.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.ci.repo_files import repo_files

CONFIG_FILE = ".buildkite/ci_config.yaml"

# Keys of ci_config.yaml that vLLM's generator reads.
CONFIG_KEYS = {
    "name",
    "job_dirs",
    "run_all_patterns",
    "run_all_exclude_patterns",
    "registries",
    "repositories",
}
# Top-level keys of a job file (test_areas/*.yaml).
FILE_KEYS = {"group", "depends_on", "steps"}
# Step fields of vLLM ci-infra's pipeline generator step model (plus
# autorun_on_main, which vLLM's lm_eval.yaml uses).
STEP_KEYS = {
    "label",
    "group",
    "key",
    "working_dir",
    "depends_on",
    "commands",
    "device",
    "agent_tags",
    "num_devices",
    "num_nodes",
    "source_file_dependencies",
    "soft_fail",
    "parallelism",
    "timeout_in_minutes",
    "mount_buildkite_agent",
    "env",
    "retry",
    "optional",
    "no_plugin",
    "mirror",
    "autorun_on_main",
}
REQUIRED_STEP_KEYS = {"label", "key", "commands"}
MIRROR_KEYS = STEP_KEYS - {"mirror", "key"} | {"dind"}
# Agent queues (`device:`) of vLLM's CI that this pipeline may target.
KNOWN_DEVICES = {
    "cpu-small",
    "cpu-medium",
    "intel_cpu",
    "arm_cpu",
    "amd_cpu",
    "l4",
    "a100",
    "h100",
    "h200",
    "h200_18gb",
    "h200_35gb",
    "b200",
    "b200-k8s",
    "gh200",
}
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
TYPES: dict[str, type | tuple[type, ...]] = {
    "label": str,
    "group": str,
    "key": str,
    "working_dir": str,
    "depends_on": list,
    "commands": list,
    "device": str,
    "agent_tags": dict,
    "num_devices": int,
    "num_nodes": int,
    "source_file_dependencies": list,
    "soft_fail": bool,
    "parallelism": int,
    "timeout_in_minutes": int,
    "mount_buildkite_agent": bool,
    "env": dict,
    "retry": dict,
    "optional": bool,
    "no_plugin": bool,
    "mirror": dict,
    "autorun_on_main": bool,
    "dind": bool,
}

# Flags whose value is an output the command writes (not checked).
OUTPUT_FLAGS = {
    "--save",
    "-o",
    "--output",
    "--output-path",
    "--output_path",
    "--out",
    "--junitxml",
    "--junit-xml",
    "--plot",
    "--log-file",
}
REDIRECTS = {">", ">>", "2>", "2>>", "&>", "tee"}
FILE_EXTS = (".py", ".sh", ".yaml", ".yml", ".json", ".txt", ".toml", ".cfg", ".md")

# lm-eval-harness config schema (vLLM's, plus this repo's extensions).
LM_EVAL_REQUIRED = {"model_name", "tasks", "limit", "num_fewshot"}
LM_EVAL_OPTIONAL = {
    "rtol",
    "max_model_len",
    "batch_size",
    "backend",
    "enforce_eager",
    "kv_cache_dtype",
    "trust_remote_code",
    "gen_kwargs",
    "env_vars",
    "apply_chat_template",
    "fewshot_as_multiturn",
    "tokenizer_mode",
    "dtype",
    "num_concurrent",
    # vllm-myops extensions (see .buildkite/lm-eval-harness/README in the
    # runner's docstring)
    "tiny_model",
    "real_model",
    "real_text",
    "required_device",
    "compare_native",
    "max_loglik_diff",
    "server_args",
}


@dataclass
class Step:
    file: str  # repo-relative yaml path
    group: str
    label: str
    key: str
    data: dict[str, Any]

    @property
    def deps(self) -> list[str]:
        return list(self.data.get("source_file_dependencies") or [])

    @property
    def optional(self) -> bool:
        return bool(self.data.get("optional", False))


@dataclass
class Pipeline:
    root: Path
    config: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def repo_paths(root: Path) -> list[str]:
    """Tracked plus untracked-but-not-ignored files, repo-relative."""
    return repo_files(root, {".git", ".venv", "build"})


def load_pipeline(root: Path) -> Pipeline:
    """Parses ci_config.yaml and every job file; structural errors collected."""
    root = root.resolve()
    cfg_path = root / CONFIG_FILE
    errors: list[str] = []
    try:
        config = yaml.safe_load(cfg_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        return Pipeline(root, {}, [], [f"{CONFIG_FILE}: cannot load: {e}"])
    if not isinstance(config, dict):
        return Pipeline(root, {}, [], [f"{CONFIG_FILE}: not a mapping"])
    pipe = Pipeline(root, config, [], errors)
    for k in sorted(set(config) - CONFIG_KEYS):
        errors.append(
            f"{CONFIG_FILE}: unknown key {k!r} (allowed: {sorted(CONFIG_KEYS)})"
        )
    for k in ("name", "job_dirs"):
        if k not in config:
            errors.append(f"{CONFIG_FILE}: missing {k!r}")
    for k in ("run_all_patterns", "run_all_exclude_patterns"):
        pats = config.get(k, [])
        if not isinstance(pats, list):
            errors.append(f"{CONFIG_FILE}: {k} must be a list")
            continue
        for p in pats:
            try:
                re.compile(str(p))
            except re.error as e:
                errors.append(f"{CONFIG_FILE}: {k}: bad regex {p!r}: {e}")
    for job_dir in config.get("job_dirs") or []:
        d = root / job_dir
        if not d.is_dir():
            errors.append(f"{CONFIG_FILE}: job_dir {job_dir!r} does not exist")
            continue
        for path in sorted(d.rglob("*.yaml")):
            _load_job_file(pipe, path)
    return pipe


def _load_job_file(pipe: Pipeline, path: Path) -> None:
    rel = path.relative_to(pipe.root).as_posix()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        pipe.errors.append(f"{rel}: YAML error: {e}")
        return
    if not isinstance(data, dict):
        pipe.errors.append(f"{rel}: top level must be a mapping")
        return
    for k in sorted(set(data) - FILE_KEYS):
        pipe.errors.append(
            f"{rel}: unknown top-level key {k!r} (allowed: {sorted(FILE_KEYS)})"
        )
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        pipe.errors.append(f"{rel}: 'steps' must be a non-empty list")
        return
    group = str(data.get("group", ""))
    for i, raw in enumerate(steps):
        if not isinstance(raw, dict):
            pipe.errors.append(f"{rel}: step #{i + 1} is not a mapping")
            continue
        label = str(raw.get("label", f"#{i + 1}"))
        key = str(raw.get("key", ""))
        pipe.steps.append(Step(rel, group, label, key, raw))


def _where(step: Step) -> str:
    return f"{step.file}: step {step.key or step.label!r}"


def check_step_fields(step: Step, all_keys: set[str]) -> list[str]:
    errs = []
    w = _where(step)
    d = step.data
    for k in sorted(set(d) - STEP_KEYS):
        errs.append(f"{w}: unknown field {k!r}")
    for k in sorted(REQUIRED_STEP_KEYS - set(d)):
        errs.append(f"{w}: missing required field {k!r}")
    for k, v in d.items():
        want = TYPES.get(k)
        if want is None:
            continue
        ok = isinstance(v, want) and not (want is int and isinstance(v, bool))
        if not ok:
            errs.append(
                f"{w}: {k} must be {getattr(want, '__name__', want)}, got {v!r}"
            )
    if isinstance(d.get("key"), str) and not KEY_RE.match(d["key"]):
        errs.append(f"{w}: key {d['key']!r} must match {KEY_RE.pattern}")
    cmds = d.get("commands")
    if isinstance(cmds, list):
        if not cmds:
            errs.append(f"{w}: commands is empty")
        for c in cmds:
            if not isinstance(c, str) or not c.strip():
                errs.append(f"{w}: every command must be a non-empty string, got {c!r}")
    for k in ("timeout_in_minutes", "num_devices", "num_nodes"):
        v = d.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            errs.append(f"{w}: {k} must be >= 1")
    if d.get("num_nodes") and not d.get("num_devices"):
        errs.append(f"{w}: 'num_devices' must be defined if 'num_nodes' is defined")
    par = d.get("parallelism")
    if isinstance(par, int) and not isinstance(par, bool):
        if par < 2:
            errs.append(f"{w}: parallelism must be >= 2 (omit it for one job)")
        text = "\n".join(c for c in d.get("commands") or [] if isinstance(c, str))
        if "BUILDKITE_PARALLEL_JOB" not in text:
            errs.append(
                f"{w}: parallelism {par} but no command uses $$BUILDKITE_PARALLEL_JOB: "
                "every job would run the same work"
            )
    dev = d.get("device")
    if isinstance(dev, str) and dev not in KNOWN_DEVICES:
        errs.append(f"{w}: unknown device {dev!r} (known: {sorted(KNOWN_DEVICES)})")
    for dep in d.get("depends_on") or []:
        if dep not in all_keys:
            errs.append(f"{w}: depends_on {dep!r} is not a step key of this pipeline")
    env = d.get("env")
    if isinstance(env, dict):
        for k, v in env.items():
            if not isinstance(k, str) or not isinstance(v, str):
                errs.append(
                    f"{w}: env {k!r}: keys and values must be strings (quote them)"
                )
    mirror = d.get("mirror")
    if isinstance(mirror, dict):
        for hw, spec in mirror.items():
            if not isinstance(spec, dict):
                errs.append(f"{w}: mirror {hw!r} must be a mapping")
                continue
            for k in sorted(set(spec) - MIRROR_KEYS):
                errs.append(f"{w}: mirror {hw!r}: unknown field {k!r}")
    return errs


def check_dependencies(step: Step, paths: list[str], dirs: set[str]) -> list[str]:
    errs = []
    deps = step.data.get("source_file_dependencies")
    if deps is None:
        return errs
    if not isinstance(deps, list) or not deps:
        return [f"{_where(step)}: source_file_dependencies must be a non-empty list"]
    for dep in deps:
        if not isinstance(dep, str) or not dep.strip("!"):
            errs.append(f"{_where(step)}: bad source_file_dependencies entry {dep!r}")
            continue
        p = dep[1:] if dep.startswith("!") else dep
        if p.rstrip("/") in dirs or any(f.startswith(p) for f in paths):
            continue
        errs.append(
            f"{_where(step)}: source_file_dependencies entry {dep!r} matches no file "
            "or directory in the repo"
        )
    return errs


def _shell_words(command: str) -> list[str]:
    lex = shlex.shlex(command.replace("$$", "$"), posix=True, punctuation_chars="|&;<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def command_paths(
    command: str, cwd: str
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Repo paths a command names: (kind, path relative to the repo, token),
    kind in {"path", "module", "config-list"}; plus parse errors.

    cwd is the step's working directory relative to the repo root ("" for
    the root); a ``cd DIR`` inside the command moves it for what follows.
    """
    try:
        words = _shell_words(command)
    except ValueError as e:
        return [], [f"cannot parse command {command!r}: {e}"]
    found: list[tuple[str, str, str]] = []
    skip_next = False
    prev = ""
    for i, w in enumerate(words):
        if skip_next:
            skip_next = False
            prev = w
            continue
        if w in OUTPUT_FLAGS or w in REDIRECTS:
            skip_next = True
            prev = w
            continue
        if prev == "cd":
            cwd = (
                os.path.normpath(os.path.join(cwd, w)) if not w.startswith("/") else cwd
            )
            prev = w
            continue
        if prev == "-m" and i >= 2 and re.search(r"python[0-9.]*$", words[i - 2]):
            found.append(("module", w, w))
            prev = w
            continue
        kind = "path"
        value = w
        if w.startswith("-"):
            flag, eq, value = w.partition("=")
            if not eq or flag in OUTPUT_FLAGS:
                prev = w
                continue
            if flag == "--config-list-file":
                kind = "config-list"
        elif prev == "--config-list-file":
            kind = "config-list"
        prev = w
        value = value.split("::", 1)[0]
        if (
            not value
            or value.startswith(("/", "~", "$"))
            or "://" in value
            or "$" in value
        ):
            continue
        if "=" in value and not value.startswith("."):
            continue  # VAR=value assignment or pkg==version
        looks_like_path = "/" in value or value.endswith(FILE_EXTS)
        if not looks_like_path:
            continue
        rel = (
            os.path.normpath(os.path.join(cwd, value))
            if cwd
            else os.path.normpath(value)
        )
        found.append((kind, rel, w))
    return found, []


def check_commands(step: Step, root: Path, top_level: set[str]) -> list[str]:
    errs = []
    wd = str(step.data.get("working_dir") or "")
    if wd and (wd.startswith("/") or not (root / wd).is_dir()):
        errs.append(
            f"{_where(step)}: working_dir {wd!r} must be a directory relative to the repo"
        )
        return errs
    for cmd in step.data.get("commands") or []:
        if not isinstance(cmd, str):
            continue
        found, parse_errs = command_paths(cmd, wd)
        errs += [f"{_where(step)}: {e}" for e in parse_errs]
        for kind, rel, token in found:
            if kind == "module":
                top = rel.split(".")[0]
                if top not in top_level:
                    continue  # not one of this repo's packages
                base = root / rel.replace(".", "/")
                if not (
                    base.with_suffix(".py").is_file()
                    or (base / "__init__.py").is_file()
                ):
                    errs.append(
                        f"{_where(step)}: `python -m {rel}`: no such module in the repo"
                    )
                continue
            first = rel.split("/")[0]
            if "/" in token and first not in top_level and not wd:
                continue  # e.g. a path inside an installed package
            if any(ch in rel for ch in "*?["):
                if not list(root.glob(rel)):
                    errs.append(f"{_where(step)}: {token!r} matches no file")
                continue
            if not (root / rel).exists():
                errs.append(
                    f"{_where(step)}: command names {token!r}, which does not exist"
                )
                continue
            if kind == "config-list":
                errs += [f"{_where(step)}: {e}" for e in check_lm_eval_list(root, rel)]
    return errs


BASELINES_DIR = "benchmarks/results/baselines"


def queue_baseline_device(device: Any) -> str:
    """The baselines folder of an agent queue: its GPU model (the part before
    '_' or '-': h200_18gb -> h200), cpu for a CPU queue or none."""
    dev = str(device or "").lower()
    if not dev or "cpu" in dev:
        return "cpu"
    return re.split(r"[_-]", dev, maxsplit=1)[0]


def check_compare_baselines(step: Step, root: Path) -> list[str]:
    errs = []
    slug = queue_baseline_device(step.data.get("device"))
    for cmd in step.data.get("commands") or []:
        if not isinstance(cmd, str):
            continue
        try:
            words = _shell_words(cmd)
        except ValueError:
            continue  # reported by check_commands
        for i, w in enumerate(words):
            name = None
            if w == "--compare-baseline" and i + 1 < len(words):
                name = words[i + 1]
            elif w.startswith("--compare-baseline="):
                name = w.split("=", 1)[1]
            if name is None or "$" in name:
                continue
            stem = name[: -len(".json")] if name.endswith(".json") else name
            rel = f"{BASELINES_DIR}/{slug}/{stem}.json"
            if not (root / rel).is_file():
                have = sorted(
                    d.parent.name for d in (root / BASELINES_DIR).glob(f"*/{stem}.json")
                )
                errs.append(
                    f"{_where(step)}: --compare-baseline {name} on queue "
                    f"{step.data.get('device') or '(none)'} needs {rel}, which does not "
                    f"exist (devices with it: {', '.join(have) or 'none'})"
                )
    return errs


def check_lm_eval_config(data: Any, name: str) -> list[str]:
    """vLLM lm-eval-harness config schema."""
    if not isinstance(data, dict):
        return [f"{name}: not a mapping"]
    errs = [f"{name}: missing {k!r}" for k in sorted(LM_EVAL_REQUIRED - set(data))]
    for k in sorted(set(data) - LM_EVAL_REQUIRED - LM_EVAL_OPTIONAL):
        errs.append(f"{name}: unknown key {k!r}")
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return errs + [f"{name}: tasks must be a non-empty list"]
    for t in tasks:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            errs.append(f"{name}: each task needs a 'name'")
            continue
        metrics = t.get("metrics")
        if not isinstance(metrics, list) or not metrics:
            errs.append(
                f"{name}: task {t.get('name')!r} needs a non-empty 'metrics' list"
            )
            continue
        for m in metrics:
            if (
                not isinstance(m, dict)
                or not isinstance(m.get("name"), str)
                or not isinstance(m.get("value"), (int, float))
                or isinstance(m.get("value"), bool)
            ):
                errs.append(
                    f"{name}: metric {m!r} needs 'name' (str) and 'value' (number)"
                )
    rtol = data.get("rtol")
    if rtol is not None and not (isinstance(rtol, (int, float)) and 0 <= rtol < 1):
        errs.append(f"{name}: rtol must be a number in [0, 1)")
    if not isinstance(data.get("num_fewshot"), int):
        errs.append(f"{name}: num_fewshot must be an integer")
    limit = data.get("limit")
    if limit is not None and not isinstance(limit, (int, float)):
        errs.append(f"{name}: limit must be a number or null")
    return errs


def check_lm_eval_list(root: Path, rel: str) -> list[str]:
    errs = []
    list_file = root / rel
    for line in list_file.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        cfg = list_file.parent / line
        name = os.path.relpath(cfg, root)
        if not cfg.is_file():
            errs.append(f"{rel}: lists {line!r}, which does not exist")
            continue
        try:
            data = yaml.safe_load(cfg.read_text())
        except yaml.YAMLError as e:
            errs.append(f"{name}: YAML error: {e}")
            continue
        errs += check_lm_eval_config(data, name)
    return errs


def validate(root: Path) -> tuple[Pipeline, list[str]]:
    pipe = load_pipeline(root)
    errors = list(pipe.errors)
    paths = repo_paths(pipe.root)
    dirs: set[str] = set()
    for p in paths:
        parts = p.split("/")
        for n in range(1, len(parts)):
            dirs.add("/".join(parts[:n]))
    top_level = {p.split("/")[0] for p in paths}
    keys = [s.key for s in pipe.steps if s.key]
    for k in sorted({k for k in keys if keys.count(k) > 1}):
        errors.append(f"duplicate step key {k!r}")
    labels = [s.label for s in pipe.steps]
    for lab in sorted({x for x in labels if labels.count(x) > 1}):
        errors.append(f"duplicate step label {lab!r}")
    for step in pipe.steps:
        errors += check_step_fields(step, set(keys))
        errors += check_dependencies(step, paths, dirs)
        errors += check_commands(step, pipe.root, top_level)
        errors += check_compare_baselines(step, pipe.root)
    return pipe, errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--root", default=None, help="repo root (default: this script's repo)"
    )
    ap.add_argument("--quiet", action="store_true", help="print problems only")
    args = ap.parse_args(argv)
    root = Path(args.root) if args.root else Path(__file__).resolve().parents[3]
    pipe, errors = validate(root)
    for e in errors:
        print(f"ERROR {e}")
    if errors:
        print(f"pipeline INVALID: {len(errors)} problem(s)")
        return 1
    if not args.quiet:
        files = sorted({s.file for s in pipe.steps})
        print(
            f"pipeline OK: {len(pipe.steps)} steps in {len(files)} files ({', '.join(files)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Result files as runs: where each came from and the machine it ran on, and their records
merged into one list, labelled with the machine and the file (the report's inputs).

Every record is labelled with the machine it ran on (its GPU, else its CPU, from the
file's environment). Where two files hold the same kernel x problem on the same machine,
the newer file's row is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import results
from .backend_table import BACKENDS, GPU
from .host import CPU_MODEL
from .machines import environment_of, row_machine


@dataclass
class Run:
    """One result file: where it came from and the machine it ran on."""

    path: Path
    environment: dict
    settings: dict
    records: list[dict]
    machine: str

    @property
    def created(self) -> str:
        return str(self.environment.get("created") or "")

    @property
    def commit(self) -> str:
        return str(self.environment.get("git_commit") or "")


def machine_label(environment: dict) -> str:
    """The machine a file ran on: the name of the GPU a backend saw (a GPU backend's before
    a selected device's), else its CPU model and cores."""
    backends = environment.get("backends") or {}
    for row in sorted(BACKENDS.values(), key=lambda row: row.device != GPU):
        gpu = row.gpu_name(backends.get(row.name) or {})
        if gpu:
            return gpu
    cpu = str(environment.get(CPU_MODEL) or "unknown CPU")
    cores = environment.get("cpu_cores")
    return f"{cpu} ({cores} cores)" if cores else cpu


def load_runs(paths: list[Path]) -> list[Run]:
    """Read result files (ValueError naming a bad one), oldest first. A cluster run's file
    becomes one run per machine and device model, each with its worker's environment."""
    runs = []
    for path in paths:
        document = results.load(Path(path))
        env = document.get("environment") or {}
        settings = document.get("settings") or {}
        groups: dict[str | None, list[dict]] = {}
        for record in document.get("results") or []:
            groups.setdefault(row_machine(record), []).append(record)
        for machine, records in groups.items():
            if machine is None:  # a local run's rows: the file names the machine
                runs.append(Run(Path(path), env, settings, records, machine_label(env)))
            else:
                recorded = [r for r in records if r.get("worker") in (env.get("workers") or {})]
                runs.append(Run(Path(path), environment_of(recorded[0], env) if recorded
                                else env, settings, records, machine))
    runs.sort(key=lambda r: r.created)
    return runs


def problem_key(record: dict) -> tuple:
    """Every field of a record's problem, as a key."""
    return tuple(sorted((record.get("problem") or {}).items()))


def merge(runs: list[Run]) -> list[dict]:
    """Every run's records, labelled with ``machine`` and ``source``; a kernel x problem run
    again on the same machine keeps its newest row."""
    merged: dict[tuple, dict] = {}
    for run in runs:  # oldest first: newer rows replace older ones
        for record in run.records:
            key = (run.machine, record["kernel"], problem_key(record),
                   record.get("l2"), record.get("device"))
            merged[key] = {**record, "machine": run.machine, "source": run.path.name,
                           "commit": run.commit}
    return list(merged.values())


def by_machine(records: list[dict]) -> dict[str, list[dict]]:
    """Records grouped by the ``machine`` label ``merge`` gave them, in first-seen order."""
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r.get("machine", ""), []).append(r)
    return out

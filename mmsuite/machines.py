"""Which machine and device a result row ran on, from the row or from its file.

A row of a local run ran where its file's environment says. A row of a cluster
run (``mmsuite run --cluster``) names its own ``host``, ``worker`` and
``device_model`` (``device_uuid`` for a GPU), and the file keeps each worker's
environment under ``environment.workers``: one file then holds several machines.
"""

from __future__ import annotations

from .backend_table import BACKENDS, GPU
from .host import CPU_MODEL


def environment_of(record: dict, environment: dict) -> dict:
    """The environment ``record`` was measured in: its worker's, for a cluster row whose
    worker's environment was recorded; the file's otherwise."""
    worker = record.get("worker")
    found = (environment.get("workers") or {}).get(worker) if worker is not None else None
    return found if isinstance(found, dict) else environment


def device_model(record: dict, environment: dict) -> str:
    """The model of the device ``record`` timed: the GPU's name, the OpenCL device's, or the
    CPU's; empty where neither the row nor its environment says."""
    if record.get("device_model"):
        return str(record["device_model"])
    env = environment_of(record, environment)
    backend = str(record.get("backend"))
    facts = (env.get("backends") or {}).get(backend) or {}
    row = BACKENDS.get(backend)
    if row is None or row.device_field is None:  # the host's CPU
        return str(env.get(CPU_MODEL) or "")
    if row.device == GPU:
        for entry in facts.get("devices") or []:  # a multi-GPU sweep: one entry per GPU
            if isinstance(entry, dict) and entry.get("index") == record.get("device"):
                return str(entry.get(row.device_field) or "")
    return str(facts.get(row.device_field) or "")


def row_machine(record: dict) -> str | None:
    """The machine label of a cluster row (its device model on its host); None for a row
    that does not name its host (a local run's: its file names the machine)."""
    host = record.get("host")
    if not host:
        return None
    return f"{record.get('device_model') or 'unknown device'} on {host}"

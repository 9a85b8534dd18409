"""Reproduce the regression gate's false-alarm and detection rates.

    python scripts/gate_trials.py --trials 20 --busy-neighbour
    python scripts/gate_trials.py --trials 10 --plant cuda --kernel 'cuda.0[78]_*' \
        --shape 4096 --threshold 0.02 --max-time 4
    python scripts/gate_trials.py --trials 20 --busy-neighbour --kernel 'cpu.omp_tiled' \
        --kernel 'cpu.seq_*' --threads 1 --duet

Each trial is one ``mmsuite continuous`` call; the table counts, per kind of trial, the
trials that exited 0 or 1 and the rows called slower:

- ``same code``: HEAD against HEAD, judged by the times (``--judge-identical``), so that
  the statistics, not the code hashes, must find nothing;
- ``planted``: HEAD against a commit that makes one rung do more work (``--plant c``:
  ``cpu.omp_tiled`` recomputes about a tenth of its tiles in a parallel loop of their own;
  ``--plant c10``: it computes every 10th tile twice, 12.5% more work at 768^3, in its one
  parallel loop; ``--plant cuda``: the CUDA rung
  ``cuda.07_blocktile_2d`` runs its K loop 1/17 further over zeros, 2.6% slower on an
  H100), which must be called slower, and no other row.

The planted commit is made in a temporary clone; nothing is changed in the repository.
``--busy-neighbour`` keeps one core busy with another process for the whole run, as a
shared CI machine often is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _plant_c(text: str) -> str:
    """Recompute the first tenth of the tile rows before the real pass, which overwrites
    them (beta is 0 in the trials): the same result, about 10% more work."""
    old = "    for (long p = 0; p < batch; ++p) {\n"
    extra = ("    for (long p = 0; p < batch && beta == 0.0f; ++p) {\n"
             "        const long extra = (tiles_i + 5) / 10;\n"
             "#pragma omp parallel for schedule(dynamic, 1) collapse(2)\n"
             "        for (long ti = 0; ti < extra; ++ti)\n"
             "            for (long tj = 0; tj < tiles_j; ++tj)\n"
             "                ladder_tile(m, n, k, alpha, MM_A(p), MM_B(p), beta, MM_C(p),\n"
             "                            ti * LADDER_TI, tj * LADDER_TJ);\n"
             "    }\n")
    if old not in text:
        raise ValueError("its loop over the batch changed")
    return text.replace(old, extra + old, 1)


def _plant_c10(text: str) -> str:
    """Compute every 10th tile twice (beta is 0 in the trials, so the second pass writes
    the same), inside the one parallel loop: the same result, 3 of the 24 tiles more at
    768^3 (12.5% more work), with no barrier added."""
    old = ("            for (long tj = 0; tj < tiles_j; ++tj)\n"
           "                ladder_tile(m, n, k, alpha, MM_A(p), MM_B(p), beta, MM_C(p), "
           "ti * LADDER_TI,\n"
           "                            tj * LADDER_TJ);\n")
    new = ("            for (long tj = 0; tj < tiles_j; ++tj) {\n"
           "                if (beta == 0.0f && (ti * tiles_j + tj) % 10 == 0)\n"
           "                    ladder_tile(m, n, k, alpha, MM_A(p), MM_B(p), beta, MM_C(p),\n"
           "                                ti * LADDER_TI, tj * LADDER_TJ);\n"
           "                ladder_tile(m, n, k, alpha, MM_A(p), MM_B(p), beta, MM_C(p), "
           "ti * LADDER_TI,\n"
           "                            tj * LADDER_TJ);\n"
           "            }\n")
    if old not in text:
        raise ValueError("its loop over the tiles changed")
    return text.replace(old, new, 1)


def _plant_cuda(text: str) -> str:
    """Run the K loop 1/17 further, over zeros (the loads are predicated on K): the same
    result, 2.5-2.7% slower on the H100 at 4096^3. An iteration that loads nothing costs
    less than a real one, and not in proportion: 1/32 further measured 0.6%, 1/12 5.0%,
    1/6 11.7%."""
    old = "    for (int k0 = 0; k0 < K; k0 += BK) {\n"
    if old not in text:
        raise ValueError("its K loop changed")
    return text.replace(old, "    for (int k0 = 0; k0 < K + K / 17; k0 += BK) {\n", 1)


PLANTS = {  # kind: (source file, the kernel it slows, the edit)
    "c": ("csrc/05_omp_tiled.c", "cpu.omp_tiled", _plant_c),
    "c10": ("csrc/05_omp_tiled.c", "cpu.omp_tiled", _plant_c10),
    "cuda": ("cuda/07_blocktile_2d.cu", "cuda.07_blocktile_2d", _plant_cuda),
}


def plant(repo: Path, where: Path, kind: str) -> str:
    """Clone ``repo`` into ``where`` and commit the planted slowdown; the kernel slowed."""
    subprocess.run(["git", "clone", "--quiet", str(repo), str(where)], check=True)
    path, kernel, edit = PLANTS[kind]
    source = where / path
    try:
        source.write_text(edit(source.read_text()))
    except ValueError as exc:
        sys.exit(f"cannot plant into {path}: {exc}")
    subprocess.run(["git", "-C", str(where), "-c", "user.name=gate", "-c",
                    "user.email=gate@localhost", "commit", "--quiet", "-am",
                    f"planted slowdown in {kernel}"], check=True)
    return kernel


def trial(repo: Path, base: str, head: str, args: argparse.Namespace, cache: Path,
          extra: list[str], keep_as: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        verdict_file = Path(tmp) / "verdicts.json"
        command = [sys.executable, "-m", "mmsuite.cli", "continuous", base, head,
                   "--repo", str(repo), "--cache-dir", str(cache), "--threshold",
                   str(args.threshold), "--verdict-json", str(verdict_file), *extra]
        results_file = keep_as or Path(tmp) / "rows.json"
        command += ["--json", str(results_file)]
        if args.max_time is not None:
            command += ["--max-time", str(args.max_time)]
        for glob in args.kernel:
            command += ["--kernel", glob]
        if args.shape:
            command += ["--shape", args.shape]
        command += _measurement(args) + (["--duet"] if args.duet else [])
        command += args.continuous_option
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.monotonic() - started
        if done.returncode not in (0, 1):
            sys.exit(f"continuous failed ({done.returncode}):\n{done.stderr[-2000:]}")
        rows = json.loads(verdict_file.read_text())["rows"]
        records = json.loads(results_file.read_text())["results"]
    # The interval, rounds and load of each row, from HEAD's results (in the same order).
    for row, record in zip(rows, records):
        row["paired"] = record.get("paired") or {}
        row["others_share"] = (record.get("host_load") or {}).get("others_share")
    return {"exit": done.returncode, "rows": rows, "seconds": seconds}


def _row_text(row: dict) -> str:
    """``cpu.omp_tiled @ 768^3 slower 1.121 [1.071-1.170] 84 rounds 14.2 s, load 52%``."""
    paired = row.get("paired") or {}
    low, high = paired.get("low"), paired.get("high")
    interval = f" [{low:.3f}-{high:.3f}]" if low is not None and high is not None else ""
    share = row.get("others_share")
    measured = row.get("measured") or {}  # the gate's record of the row, where it has one
    spent, threads = measured.get("rounds_seconds"), measured.get("threads")
    return (f"{row['kernel']} @ {row['problem']} {row['verdict']} {row['ratio'] or 0:.3f}"
            f"{interval} {paired.get('rounds', 0)} rounds"
            + (f" in {spent:.1f} s" if spent is not None else "")
            + (f", threads {threads}" if threads is not None else "")
            + (f", {measured['mode']}" if measured.get("mode") else "")
            + (f", load {share:.0%}" if share is not None else ""))


def _measurement(args: argparse.Namespace) -> list[str]:
    """The options both ``run`` and ``continuous`` take."""
    return ["--threads", str(args.threads)] if args.threads is not None else []


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the trials as Ctrl-C does, with the table


def main() -> None:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path("."))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kernel", action="append", default=None)
    parser.add_argument("--shape", default="512,1024", help="problems, as mmsuite run's --shape")
    parser.add_argument("--threshold", type=float, default=0.05)
    parser.add_argument("--max-time", type=float, default=None,
                        help="seconds of rounds per row (default: continuous's own)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OpenMP threads of the CPU rungs (default: continuous's own)")
    parser.add_argument("--duet", action="store_true",
                        help="continuous --duet: rows on one thread, both sides at once")
    parser.add_argument("--plant", choices=sorted(PLANTS) + ["none"], default="c")
    parser.add_argument("--skip-same", action="store_true", help="only planted trials")
    parser.add_argument("--time-run", action="store_true",
                        help="also time one `mmsuite run` of the selection, for the ratio of "
                        "wall times")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each trial's results file (every round, and where each "
                        "worker pair began) in DIR")
    parser.add_argument("--busy-neighbour", action="store_true",
                        help="keep one core busy with another process meanwhile")
    parser.add_argument("--nice-neighbour", metavar="COMMAND", default=None,
                        help="also run this shell command over and over at nice 19 meanwhile "
                        "(a second job: a test suite, say)")
    parser.add_argument("--continuous-option", action="append", default=[], metavar="OPT",
                        help="pass OPT on to every continuous call (repeatable)")
    parser.add_argument("--cache-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "mmsuite-gate-builds")
    args = parser.parse_args()
    args.kernel = args.kernel or ["cpu.omp_*"]
    repo = args.repo.resolve()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) \
        if args.busy_neighbour else None
    niced = subprocess.Popen(["nice", "-n", "19", "sh", "-c",
                              f"while true; do {args.nice_neighbour}; done"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True) if args.nice_neighbour else None
    lines = []
    try:
        if args.time_run:
            command = [sys.executable, "-m", "mmsuite.cli", "run", "--shape", args.shape,
                       *_measurement(args)]
            for glob in args.kernel:
                command += ["--kernel", glob]
            started = time.monotonic()
            subprocess.run(command, capture_output=True, check=False)
            print(f"one `mmsuite run` of the selection: {time.monotonic() - started:.0f} s",
                  flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            kinds = [] if args.skip_same else [("same code", repo, "HEAD", ["--judge-identical"],
                                                None)]
            if args.plant != "none":
                slowed = plant(repo, Path(tmp) / "planted", args.plant)
                kinds.append(("planted", Path(tmp) / "planted", "HEAD~1", [], slowed))
            # The kinds take turns, trial by trial, so that both see the same hours of the
            # machine, and an interrupted run still has as many trials of each.
            outcomes: dict[str, list[dict]] = {kind[0]: [] for kind in kinds}
            try:
                for index in range(args.trials):
                    for name, where, base, extra, slowed in kinds:
                        keep_as = None
                        if args.keep is not None:
                            args.keep.mkdir(parents=True, exist_ok=True)
                            keep_as = args.keep / f"{name.replace(' ', '-')}-{index + 1}.json"
                        outcome = trial(where, base, "HEAD", args, args.cache_dir, extra,
                                        keep_as)
                        outcomes[name].append(outcome)
                        rows = ", ".join(_row_text(r) for r in outcome["rows"])
                        print(f"{name} trial {index + 1}: exit {outcome['exit']}: {rows} "
                              f"({outcome['seconds']:.0f} s)", file=sys.stderr, flush=True)
                        for r in outcome["rows"]:
                            if r["kernel"] == slowed and r["verdict"] != "slower":
                                print(f"  missed {r['problem']}: {r['reason']}",
                                      file=sys.stderr, flush=True)
            except KeyboardInterrupt:
                print("interrupted: the table counts the finished trials", file=sys.stderr)
            lines = [summarise(name, outcomes[name], slowed)
                     for name, _, _, _, slowed in kinds if outcomes[name]]
    finally:
        if spinner is not None:
            spinner.kill()
        if niced is not None:
            os.killpg(niced.pid, signal.SIGKILL)  # the loop and the command it runs
    print("| trials | kind | exit 0 | exit 1 | rows called slower | planted row caught | "
          "other rows called slower | verdicts | mean wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))


def summarise(name: str, outcomes: list[dict], slowed: str | None) -> str:
    exits = [o["exit"] for o in outcomes]
    slower = [(r["kernel"], r["problem"]) for o in outcomes for r in o["rows"]
              if r["verdict"] == "slower"]
    verdicts: dict[str, int] = {}
    for o in outcomes:
        for r in o["rows"]:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    caught = "-"
    others = len(slower)
    if slowed is not None:
        per_trial = [all(r["verdict"] == "slower" for r in o["rows"] if r["kernel"] == slowed)
                     for o in outcomes]
        caught = f"{sum(per_trial)} of {len(outcomes)}"
        others = sum(1 for k, _ in slower if k != slowed)
    words = ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items()))
    mean = sum(o["seconds"] for o in outcomes) / len(outcomes)
    return (f"| {len(outcomes)} | {name} | {exits.count(0)} | {exits.count(1)} | "
            f"{len(slower)} | {caught} | {others} | {words} | {mean:.0f} |")


if __name__ == "__main__":
    main()

"""The `dse` command.

    dse [HYDRA OVERRIDES]       run a study from the config tree (conf/), e.g. `dse system=h200`
    dse -m [SWEEP OVERRIDES]    Hydra multirun: one job per point of a sweep
    dse SUBCOMMAND [ARGS]       eval, search, traffic, sensitivity, codesign, whatif, plot, ...

One grammar (dse.interface.overrides): config fields are Hydra overrides in `dse` and in every subcommand
(`dse eval strategy=tp1d n1=4 n_p=128 n_d=8 nvs1=4 nvs_p=1 nvs_d=1`); flags are for files and output
formats. The NVS size is the system preset's unless system.nvs_size is set. Every subcommand takes
--help.
"""

from __future__ import annotations

import importlib
import sys

#: subcommand -> (module with main(argv), one-line description)
SUBCOMMANDS = {
    "eval": ("dse.commands.evaluate", "evaluate one configuration; print its time and memory breakdown"),
    "search": ("dse.commands.search", "search the design space; print the fastest configurations"),
    "study": ("dse.commands.study", "run the whole seed-001 study (9.18M candidates) and report its wall time"),
    "bench": ("dse.commands.bench", "measure candidates per second of each strategy's kernel"),
    "validate": ("dse.commands.validate", "compare with published results (lbnl, nic, railonly, moe, measured) and devices"),
    "calibrate": ("dse.commands.calibrate", "fit the default profile's efficiencies to measured runs (optax)"),
    "profiles": ("dse.commands.profiles", "measure the effect of each fix of the default profile on the optima"),
    "query": ("dse.commands.query", "answer common questions from a Parquet dataset"),
    "report": ("dse.commands.report", "draw the seed-001 figures from a dataset"),
    "plot": ("dse.commands.plot", "draw columns of any study's dataset (line, scatter, bar, pareto, breakdown)"),
    "netcost": ("dse.commands.netcost", "switches, transceivers, cost and power of rail-only vs rail-optimized"),
    "traffic": ("dse.commands.traffic", "bytes per iteration by type and domain; GPU-pair traffic matrix"),
    "sensitivity": ("dse.commands.sensitivity", "elasticities of the iteration time to every hardware field (jax.jacfwd)"),
    "codesign": ("dse.commands.codesign", "choose hardware fields by gradient (optax) within bounds and a budget"),
    "whatif": ("dse.commands.whatif", "the best plan under a failure scenario, the best re-plan, and goodput"),
}


def usage() -> str:
    lines = [__doc__.strip(), "", "subcommands:"]
    width = max(len(k) for k in SUBCOMMANDS)
    lines += [f"  {k.ljust(width)}  {d}" for k, (_, d) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def is_stray_word(argv: list[str]) -> bool:
    """Whether the first argument is neither a subcommand (checked before) nor anything Hydra reads: a flag
    (`-m`, `--cfg job`), an override `key=value`, an addition `+key=value` or a deletion `~key`."""
    return bool(argv) and not argv[0].startswith(("-", "~", "+")) and "=" not in argv[0]


def unknown_subcommand(word: str) -> str:
    """The one-line error for a first word that is neither a subcommand nor an override (`key=value`):
    the closest subcommand, and every valid one."""
    import difflib

    names = [*SUBCOMMANDS, "help"]
    low = word.strip().lower()
    close = ([k for k in names if low and (low.startswith(k) or k.startswith(low))]  # evaluate: eval
             or difflib.get_close_matches(low, names, n=1, cutoff=0.5))
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"unknown subcommand {word!r}{hint} (subcommands: {', '.join(SUBCOMMANDS)}, help; "
            "or give config overrides as key=value)")


def _one_line_argparse_errors() -> None:
    """argparse's usage errors (an unknown choice, a bad flag value) as one line, exit status 2,
    as every other invalid input: `dse report: error: argument figure: invalid choice: ...`; the
    usage stays in --help."""
    import argparse

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    argparse.ArgumentParser.error = error


def main(argv: list[str] | None = None) -> int:
    from dse.runtime import configure

    _one_line_argparse_errors()
    try:
        configure()  # before any JAX computation: XLA flags, compilation cache, 64-bit mode
    except ValueError as err:  # a bad DSE_* environment variable
        print(f"dse: error: {err}", file=sys.stderr)
        return 2
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
        from dse.spec.specs import SpecError

        try:
            return int(module.main(argv[1:]) or 0)
        except SpecError as err:
            print(f"dse {argv[0]}: error: {err}", file=sys.stderr)
            return 2
    if argv and argv[0] in ("help", "--usage"):
        print(usage())
        return 0
    if is_stray_word(argv):
        print(f"dse: error: {unknown_subcommand(argv[0])}", file=sys.stderr)
        return 2
    if argv in (["--help"], ["-h"]):  # the subcommands, then Hydra's config groups and config
        print(usage())
        print()
        from dse.interface.app import run_hydra

        return run_hydra(["--help"])
    from dse.interface.app import run_hydra
    from dse.interface.overrides import normalize_argv
    from dse.spec.specs import SpecError

    try:
        argv = normalize_argv(argv)  # an unknown key: one line naming the closest valid one
        if "-m" in argv or "--multirun" in argv:  # every swept value checked before any job starts
            from dse.interface.overrides import check_sweep

            check_sweep([a for a in argv if not a.startswith("-")])
        else:  # a sweep asked without -m: how to ask for it, in one line
            from dse.interface.overrides import check_no_sweep

            check_no_sweep([a for a in argv if "=" in a or a.startswith("~")])
    except SpecError as err:
        print(f"dse: error: {err}", file=sys.stderr)
        return 2
    return run_hydra(argv)


def _leave(code: int) -> None:
    """End the process with `code` once everything it said is out: the streams flushed, logging
    shut down and the exit handlers run, as at a normal exit; then `os._exit`, which skips only the
    interpreter's teardown (freeing every module's objects and JAX's runtime), a visible part of a
    small search's whole process. Only when nothing else runs: another non-daemon thread or a
    child process (a multirun's workers) gets the normal exit, which waits for them."""
    import atexit
    import logging
    import multiprocessing
    import os
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others or multiprocessing.active_children():
        sys.exit(code)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `dse search ... | head`: the reader left; nothing more to say
        pass
    try:
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    logging.shutdown()
    atexit._run_exitfuncs()
    os._exit(code)


def run() -> None:
    """The console script `dse`: `main`, then `_leave` with its exit status."""
    try:
        code = main()
    except SystemExit as stop:  # --help, argparse's errors
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BrokenPipeError:  # `dse bench | head -1`: the reader left before the output ended
        code = _reader_left()
    _leave(int(code or 0))


def _reader_left() -> int:
    """Whatever is left to print goes nowhere (no traceback, no second error at exit); status 1,
    the command's output having been cut short."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


if __name__ == "__main__":
    run()

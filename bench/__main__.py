"""`python -m bench` (`./scripts/bench`): run the scenarios, print the table, write the JSON.

Services: `--redis-url`/`--database-url`, else RUNSTREAM_BENCH_REDIS_URL /
RUNSTREAM_BENCH_DATABASE_URL, else RUNSTREAM_TEST_REDIS_URL / RUNSTREAM_TEST_DATABASE_URL,
else private embedded Valkey and PostgreSQL started for this invocation. Each scenario runs on
its own Postgres schema and Redis key prefix, both removed when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import secrets
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from . import revision
from .context import BenchContext, default_client_procs
from .launcher import ROOT
from .processes import Services, add_service_options, machine_cpu
from .report import Report
from .scenarios import BASELINES, ORDER, load

DEFAULT_JSON = ROOT / "bench" / "results" / "latest.json"
SLOW_FOR_QUICK = ("soak",)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a short run of every scenario (soak only if asked)"
    )
    parser.add_argument("--only", default="", help="NAME[,NAME]: these scenarios (+ baselines)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    add_service_options(parser)
    parser.add_argument(
        "--soak", type=float, default=0.0, metavar="MINUTES", help="also run `soak` this long"
    )
    parser.add_argument(
        "--client-procs",
        type=int,
        default=default_client_procs(),
        help="SSE load-generator processes (default: CPUs, 2 to 4)",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="print server/worker output when one fails"
    )
    parser.add_argument(
        "--against",
        default=None,
        metavar="REV",
        help="a git revision that side_by_side also measures, from a temporary checkout",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return parser.parse_args(argv)


def choose(args: argparse.Namespace) -> list[str]:
    if args.only:
        wanted = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in ORDER]
        if unknown:
            raise SystemExit(f"bench: unknown scenario(s) {', '.join(unknown)}; known: {ORDER}")
    else:
        wanted = [name for name in ORDER if name != "soak" or args.soak > 0]
        if args.quick:
            wanted = [name for name in wanted if name not in SLOW_FOR_QUICK or args.soak > 0]
    needed = set(wanted)
    for name in wanted:
        needed |= set(load(name).NEEDS)
    return [name for name in ORDER if name in needed and (name in wanted or name in BASELINES)]


def _raise_nofile() -> None:
    """Servers inherit this limit: idle_sse holds thousands of connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run_all(args: argparse.Namespace, names: list[str], report: Report) -> None:
    redis_url, database_url = args.redis_url, args.database_url
    if not (redis_url and database_url):
        print("starting embedded services for the missing URL(s)", flush=True)
    services = Services.resolve(redis_url, database_url)
    try:
        await services.wait_ready()
        report.meta["services"] = {
            "redis": _redact(services.redis_url),
            "postgres": _redact(services.database_url),
            "embedded": services.embedded is not None,
        }
        ctx = BenchContext(
            services=services,
            report=report,
            invocation=secrets.token_hex(3),
            quick=args.quick,
            soak_minutes=args.soak,
            client_procs=args.client_procs,
            keep_logs=args.keep_logs,
            against=args.against,
        )
        for name in names:
            print(f"\n== {name}", flush=True)
            start = time.monotonic()
            busy_before, _ = machine_cpu()
            try:
                await load(name).run(ctx)
            except Exception as exc:
                traceback.print_exc()
                outcome = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            else:
                outcome = {"status": "ok"}
            elapsed = time.monotonic() - start
            busy = (machine_cpu()[0] - busy_before) / elapsed
            report.scenario_done(
                name,
                **outcome,
                duration_s=elapsed,
                machine_busy_cores=busy,  # everything on the machine, ours and others'
                loadavg_1m_at_end=os.getloadavg()[0],
            )
            print(
                f"  ({elapsed:.1f} s; machine busy {busy:.2f} of {os.cpu_count()} cores)",
                flush=True,
            )
    finally:
        services.close()


def _redact(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name in ORDER:
            print(f"{name:20} {(load(name).__doc__ or '').splitlines()[0]}")
        return 0
    names = choose(args)
    if args.against:
        try:
            args.against_commit = revision.resolve(args.against)
        except revision.RevisionError as exc:
            raise SystemExit(f"bench: --against {args.against}: {exc}") from None
    _raise_nofile()
    report = Report(
        {
            "quick": args.quick,
            "only": args.only or None,
            "soak_minutes": args.soak,
            "client_procs": args.client_procs,
            "scenarios": names,
            "against": args.against and {"rev": args.against, "commit": args.against_commit},
        }
    )
    started = time.monotonic()
    print(f"bench: {', '.join(names)}" + (" (quick)" if args.quick else ""), flush=True)
    run = asyncio.run
    with contextlib.suppress(ImportError):  # the loop runstream's processes run on
        import uvloop

        run = uvloop.run
    try:
        run(run_all(args, names, report))
    except KeyboardInterrupt:
        print("\nbench: interrupted; reporting what was measured", file=sys.stderr)
    report.meta["duration_s"] = time.monotonic() - started
    print()
    print(report.table())
    report.write_json(args.json)
    meta = report.meta
    dirty = " (dirty tree)" if meta["git_dirty"] else ""
    print(
        f"\n{meta['git_commit'] or 'no git commit'}{dirty}, {meta['cpu_count']} CPUs, "
        f"{meta['duration_s']:.0f} s; results in {args.json}"
    )
    failed = list(report.failed())
    if failed:
        print(f"bench: scenario(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

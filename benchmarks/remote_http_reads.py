"""Remote builds over HTTP: the bounded reader (size caps, minimum rate, deadline) against fsspec's HTTP.

Since issue 27, ``http(s)://`` files of a published build are read by ``datasets_hub/remote/http_reads.py``
(aiohttp on one loop per process, every read capped at the size ``published.json`` gives it, minimum
rate and deadline checked per block) instead of fsspec's aiohttp filesystem. This times both on the same chunk files: a gym build published with small chunks,
served by the loopback server of ``benchmarks/remote.py`` (``--mbps`` MB/s shared, ``--latency-ms`` per
request), every chunk file read once per round in one concurrent call (``RemoteFolder.read_many`` against
``fsspec.filesystem("http").cat``), the two alternating for ``--rounds`` rounds. Prints a table of the
median seconds per round and writes JSON.

    .venv/bin/python benchmarks/remote_http_reads.py [--steps 20000] [--rounds 7] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import command, environment, write_report
from remote import Throttle, serve

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "remote_http_reads.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="transitions of the gym build")
    parser.add_argument("--chunk-bytes", type=int, default=16 << 10, help="uncompressed bytes per chunk")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--mbps", type=float, default=50.0)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="datasets_hub_http_reads_") as scratch:
        os.environ["DATASETS_HUB_CACHE"] = str(Path(scratch) / "cache")
        import fsspec

        import datasets_hub as dh
        from datasets_hub.remote.files import RemoteFolder

        rb = dh.load("gym/cartpole-random-v0", steps=args.steps, seed=0)
        folder = dh.export(rb, Path(scratch) / "pub", chunk_bytes=args.chunk_bytes)
        files = json.loads((folder / "published.json").read_text())["files"]
        chunks = sorted(p for p in files if not p.endswith("zarr.json"))
        limits = {p: files[p]["bytes"] for p in chunks}
        total = sum(limits.values())
        with serve(folder, Throttle(args.mbps, args.latency_ms / 1000)) as url:
            bounded = RemoteFolder(url)
            plain = fsspec.filesystem("http", block_size=0, skip_instance_cache=True)

            def read_bounded() -> int:
                got = bounded.read_many(chunks, limits)
                return sum(len(v) for v in got.values() if isinstance(v, bytes))

            def read_fsspec() -> int:
                got = plain.cat([f"{url}/{p}" for p in chunks], on_error="raise")
                return sum(len(v) for v in got.values())

            times: dict[str, list[float]] = {"bounded (datasets_hub)": [], "fsspec http (aiohttp)": []}
            for _ in range(args.rounds):
                for name, read in (("bounded (datasets_hub)", read_bounded), ("fsspec http (aiohttp)", read_fsspec)):
                    start = time.perf_counter()
                    got = read()
                    times[name].append(time.perf_counter() - start)
                    if got != total:
                        raise SystemExit(f"{name} read {got} of {total} bytes")
    rows = [
        {"reader": name, "files": len(chunks), "bytes": total, "median_s": statistics.median(t), "all_s": t}
        for name, t in times.items()
    ]
    base = rows[1]["median_s"]
    print(f"{len(chunks)} chunk files, {total:,} bytes, {args.mbps:g} MB/s, {args.latency_ms:g} ms per request")
    print(f"{'reader':<24} {'median s/round':>15} {'vs fsspec':>10}")
    for row in rows:
        print(f"{row['reader']:<24} {row['median_s']:>15.3f} {row['median_s'] / base:>9.2f}x")
    write_report({"environment": environment(), "command": command(), "settings": vars(args), "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

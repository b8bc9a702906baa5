"""Sandbox start and exec latency against the docker SDK and CLI, measured in one run.

    python benchmarks/sandbox.py [--n 50] [--image sandbox]

Prints a table, then (last line) one JSON object with start_ms, raw_start_ms,
exec_median_ms, exec_p95_ms, sdk_exec_median_ms, cli_exec_median_ms and the
ratios the foundation issue asks for. Starts are interleaved (ours, raw, ours,
...) so drift on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

import anyio

from sandgym.envs.images import ImageBuilder
from sandgym.envs.sandbox import LABEL, DockerProvider, connect


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values) * 1000, "p95": p95(values) * 1000}


async def measure(image: str, n: int) -> dict[str, dict[str, float]]:
    client = connect()
    provider = DockerProvider(run_label="benchmark")
    ours, raw = [], []
    for _ in range(n):
        start = time.perf_counter()
        sb = await provider.start(image)
        ours.append(time.perf_counter() - start)
        await sb.close()

        start = time.perf_counter()
        container = await anyio.to_thread.run_sync(
            lambda: client.containers.run(image, ["sleep", "600"], detach=True, labels={LABEL: "benchmark"})
        )
        raw.append(time.perf_counter() - start)
        await anyio.to_thread.run_sync(lambda: container.remove(force=True))

    async with provider.sandbox(image) as sb:
        for _ in range(10):  # warm up
            await sb.exec("true")
        exec_times = []
        for _ in range(max(n, 200)):
            start = time.perf_counter()
            result = await sb.exec("true")
            exec_times.append(time.perf_counter() - start)
            assert result.exit_code == 0

    container = client.containers.run(image, ["sleep", "600"], detach=True, labels={LABEL: "benchmark"})
    try:
        sdk_times, cli_times = [], []
        for _ in range(n):
            start = time.perf_counter()
            container.exec_run(["true"])
            sdk_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run(["docker", "exec", container.id, "true"], check=True)
            cli_times.append(time.perf_counter() - start)
    finally:
        container.remove(force=True)
    provider.close()
    return {
        "sandgym start": summary(ours),
        "raw docker run": summary(raw),
        "sandgym exec": summary(exec_times),
        "docker SDK exec_run": summary(sdk_times),
        "docker exec CLI": summary(cli_times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="calls per measurement (at least 50)")
    parser.add_argument("--image", default="sandbox", help="recipe name or image reference")
    args = parser.parse_args()
    n = max(args.n, 50)
    builder = ImageBuilder(connect())
    image = builder.build(args.image) if args.image in builder.recipes else args.image

    stats = anyio.run(measure, image, n)
    print(f"{'':22} {'median ms':>10} {'p95 ms':>10}   (n={n}, image {image})")
    for name, s in stats.items():
        print(f"{name:22} {s['median']:10.2f} {s['p95']:10.2f}")
    result = {
        "start_ms": round(stats["sandgym start"]["median"], 2),
        "raw_start_ms": round(stats["raw docker run"]["median"], 2),
        "exec_median_ms": round(stats["sandgym exec"]["median"], 3),
        "exec_p95_ms": round(stats["sandgym exec"]["p95"], 3),
        "sdk_exec_median_ms": round(stats["docker SDK exec_run"]["median"], 2),
        "cli_exec_median_ms": round(stats["docker exec CLI"]["median"], 2),
    }
    result["start_ratio"] = round(result["start_ms"] / result["raw_start_ms"], 3)
    result["sdk_over_exec"] = round(result["sdk_exec_median_ms"] / result["exec_median_ms"], 1)
    print(
        f"start {result['start_ratio']:.2f}x raw docker run (target <= 1.5); "
        f"exec {result['sdk_over_exec']:.0f}x faster than the SDK's exec_run (target >= 5)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""AWS provider budgets against the moto fake (calls counted with botocore event hooks).

Launch 1,000 nodes of one template: CreateFleet/RunInstances calls (budget <= 2),
DescribeInstances calls (<= 2), CreateTags calls (<= 1 per node). Then list our instances:
list_instances() time against a bare boto3 paginator over the same fake (ratio).

Prints figures; not a pass/fail test (exits 1 only when a launch or listing comes up short).
Run: .venv/bin/python bench/bench_aws.py [--quick] [N]  (`--quick`: 10 nodes, 2 runs)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
from _common import fail, parser  # also puts the repository (tests.fakes) on sys.path

from clustermgr.providers.aws.provider import AwsProvider
from clustermgr.providers.base import TAG_CLUSTER
from tests.fakes.aws_harness import contract_harness


def count_calls(provider: AwsProvider) -> Counter[str]:
    seen: Counter[str] = Counter()

    def record(model: Any, **_: Any) -> None:
        seen[model.name] += 1

    provider.ec2().meta.events.register("provide-client-params.ec2.*", record)
    return seen


def bare_list(client: Any, cluster: str) -> int:
    pages = client.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
        PaginationConfig={"PageSize": 1000},
    )
    return sum(len(r["Instances"]) for page in pages for r in page["Reservations"])


def median_time(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("nodes", nargs="?", type=int, help="how many to launch [1000; quick: 10]")
    args = cli.parse_args()
    nodes = args.nodes or (10 if args.quick else 1000)
    runs = 2 if args.quick else 5
    with tempfile.TemporaryDirectory() as tmp, contract_harness(Path(tmp)) as aws:
        provider = aws.provider()
        assert isinstance(provider, AwsProvider)
        aws.spec(["warm-up"])  # the harness's own lookups, not counted
        calls = count_calls(provider)
        names = [f"gpu-{i:05d}" for i in range(1, nodes + 1)]
        started = time.perf_counter()
        result = provider.launch(aws.spec(names), nodes, "bench-launch-1")
        took = time.perf_counter() - started
        if len(result.instances) != nodes:
            fail(f"launched {len(result.instances)} of {nodes} nodes: {result}")
        launches = calls["CreateFleet"] + calls["RunInstances"]
        print(f"launch {nodes} nodes: {len(result.instances)} started in {took:.1f} s")
        print(f"  CreateFleet/RunInstances calls: {launches} (budget <= 2)")
        print(f"  DescribeInstances calls:        {calls['DescribeInstances']} (budget <= 2)")
        print(f"  CreateTags calls:               {calls['CreateTags']} (budget <= {nodes})")
        others = {k: v for k, v in calls.items() if k not in ("CreateFleet", "RunInstances")}
        print(f"  all calls: {dict(sorted(others.items()))}")

        client = boto3.client("ec2", region_name=aws.fake.region, endpoint_url=aws.fake.url)
        listed = len(provider.list_instances())
        if listed != nodes:
            fail(f"list_instances() found {listed} of the {nodes} instances")
        ours = median_time(provider.list_instances, runs)
        bare = median_time(lambda: bare_list(client, aws.cluster), runs)
        print(f"list {listed} instances: list_instances() {ours * 1000:.0f} ms,")
        print(f"  bare boto3 paginator {bare * 1000:.0f} ms, ratio {ours / bare:.2f}")


if __name__ == "__main__":
    main()

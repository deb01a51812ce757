"""User and cloud text on an admin's terminal (docs/security.md, "What the CLI prints").

A user writes their transfer's error, a job's name and comment reach cluster events, a
cloud names its instances, tags them and words its errors, an LDAP server words its
replication errors: all of it ends in the database, and root reads it with `clustermgr`.
Each value here carries an OSC title, a clear screen, an OSC 52 clipboard write, an 8-bit
CSI, a bidi override, a zero-width space, DEL, CR and a newline that would fake a line, and
rich markup. Every read verb must print none of those characters raw (no escape sequence
reaches the terminal, no line is faked, no text reordered) and still show the value, its
characters as visible escapes, so the admin sees what the user or the cloud wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from clustermgr.db.database import Database
from clustermgr.db.models import (
    ClusterEvent,
    DaemonStatus,
    Director,
    DirectorEvent,
    ForeignInstance,
    Image,
    ImageReplica,
    InstanceTypeRow,
    LdapReplica,
    LeaderLease,
    Node,
    NodeEvent,
    Provider,
    Region,
    ReservationRow,
    Transfer,
)
from tests.conftest import EXAMPLE_CONFIG, REPO
from tests.security.conftest import Accounts, as_user
from tests.security.test_staging import (  # noqa: F401 (the staging lab's fixture)
    StageLab,
    lab,
    make_tree,
    submit,
    transfer_ids,
)

pytestmark = pytest.mark.security
BIN = Path(sys.executable).parent

PAYLOAD = (
    "\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\u202egnp.exe\u2066\u2069"
    "\u200b\x7f\r\nFAKE: ok [red]x[/red] [link=https://evil.example]click[/link]"
)
# what the admin must see instead: the same text, each character spelled out
SHOWN = (
    r"\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\u202egnp.exe\u2066\u2069"
    r"\u200b\x7f\r\nFAKE: ok [red]x[/red] [link=https://evil.example]click[/link]"
)
# what may never reach the terminal: C0 but the newline ending a line, DEL, C1, the
# Unicode line separators, bidi embeddings/overrides/isolates, zero-width characters
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def hostile(field: str) -> str:
    return f"{field}|{PAYLOAD}"


def shown(field: str) -> str:
    return f"{field}|{SHOWN}"


def assert_safe(done: subprocess.CompletedProcess[str], fields: list[str], as_json: bool) -> None:
    """No raw unsafe character in stdout or stderr; each field's value visible: escaped
    in text, exact (and ASCII-encoded) in JSON."""
    for stream in (done.stdout, done.stderr):
        found = RAW.search(stream)
        assert found is None, (found, stream[max(0, found.start() - 80) : found.end() + 80])
    if as_json:
        assert done.stdout.isascii(), done.stdout[:400]
        values = set(_strings(json.loads(done.stdout)))
        for field in fields:
            assert any(hostile(field) in value for value in values), (field, values)
        return
    for field in fields:
        assert shown(field) in done.stdout + done.stderr, (field, done.stdout, done.stderr)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


NODE = "aws-a100-001"
DIRECTOR = "director-aws-east-us-east-1"


def fill(url: str) -> None:
    """A hostile value in every field a user or a cloud supplies, through the models."""
    now = datetime.now(UTC)
    earlier = now - timedelta(minutes=5)
    database = Database(url)
    try:
        with database.session() as session:
            provider = Provider(
                name="aws-east", type="aws", region="us-east-1", credentials_source="env"
            )
            session.add(provider)
            session.flush()
            region = Region(provider_id=provider.id, name="us-east-1")
            session.add(region)
            session.flush()
            node = Node(
                name=NODE,
                kind="cloud",
                state="UP",
                state_reason=hostile("state_reason"),
                template=hostile("template"),
                provider="aws-east",
                region="us-east-1",
                partitions=hostile("partitions"),
                instance_id=hostile("instance_id"),
                instance_type=hostile("instance_type"),
                market="spot",
                private_address=hostile("private_address"),
                gpus=8,
                gpu_model=hostile("gpu_model"),
                slurm_state=hostile("slurm_state"),
                image_revision=hostile("image_revision"),
                kernel=hostile("kernel"),
                launched_at=earlier,
                version=1,
            )
            node.events.append(
                NodeEvent(
                    at=earlier,
                    old_state="BOOTING",
                    new_state="UP",
                    reason=hostile("event_reason"),
                    reason_kind="CLOUD",
                    actor=hostile("actor"),
                )
            )
            session.add(node)
            session.add(
                ClusterEvent(
                    at=earlier,
                    kind=hostile("kind"),
                    source=hostile("source"),
                    message=f"job 17 refused: name {hostile('job_name')} comment "
                    f"{hostile('comment')} features {hostile('features')}",
                )
            )
            session.add(
                DaemonStatus(
                    id="head:1",
                    host=hostile("host"),
                    pid=1,
                    role="leader",
                    heartbeat_at=now,
                    last_cycle_at=now,
                    last_cycle_ok=False,
                    last_cycle_summary=hostile("cycle_summary"),
                    last_cycle_duration_s=0.5,
                    cycles_failed_in_row=2,
                    cycles_failed=3,
                    config_path=hostile("config_path"),
                    config_digest="0123456789abcdef",
                    config_loaded_at=earlier,
                )
            )
            session.add(  # a refusal quotes what the file held
                ClusterEvent(
                    at=now,
                    kind="reload",
                    source="cm-scale@head:1",
                    message=f"reload refused, the running config kept: {hostile('reload_error')}",
                )
            )
            # the lease says it leads (SQLite's lease clock: this host's monotonic one)
            lease = session.get(LeaderLease, 1)
            assert lease is not None
            lease.holder, lease.generation = "cm-scale@head:1", 1
            lease.expires_at = time.monotonic() + 86400
            session.add(
                ForeignInstance(
                    provider="aws-east",
                    instance_id=hostile("foreign_id"),
                    template_tag=hostile("template_tag"),
                    request_tag=hostile("request_tag"),
                    role_tag=hostile("role_tag"),
                    state=hostile("foreign_state"),
                    launched_at=earlier,
                    first_seen_at=earlier,
                    last_seen_at=now,
                )
            )
            director = Director(
                name=DIRECTOR,
                region_id=region.id,
                instance_id=hostile("director_instance"),
                private_address=hostile("director_address"),
                state="UNHEALTHY",
                state_reason=hostile("director_reason"),
                state_since=earlier,
                health=hostile("health"),
            )
            director.events.append(
                DirectorEvent(
                    at=earlier,
                    old_state="READY",
                    new_state="UNHEALTHY",
                    reason=hostile("director_event"),
                    actor="cm-scale",
                )
            )
            session.add(director)
            image = Image(
                name=hostile("image"),
                version=hostile("version"),
                checksum="0" * 64,
                size_bytes=1,
            )
            session.add(image)
            session.flush()
            session.add(
                ImageReplica(
                    image_id=image.id,
                    director_id=director.id,
                    state="failed",
                    error=hostile("replica_error"),
                )
            )
            session.add(
                LdapReplica(
                    director_id=director.id,
                    mode="pull",
                    state="failed",
                    provider_csn=hostile("csn"),
                    error=f"uid {hostile('ldap_attribute')} refused",
                )
            )
            for direction in ("in", "out"):
                session.add(
                    Transfer(
                        job_id="4242",
                        user=hostile("user"),
                        uid=4242,
                        direction=direction,
                        source=hostile("source_path"),
                        destination=hostile("destination"),
                        transport="rsync",
                        state="failed",
                        error=hostile(f"error_{direction}"),
                        stage_id="s1",
                        transfer_job_id="4243" if direction == "in" else "4244",
                        stage_dir=hostile("stage_dir"),
                        items=[[hostile("item_src"), hostile("item_dest")]],
                        finished_at=now,
                    )
                )
            session.add(
                InstanceTypeRow(
                    provider="aws-east",
                    name=hostile("type_name"),
                    vcpus=8,
                    memory_mb=1024,
                    gpu_model=hostile("type_gpu"),
                    gpu_count=1,
                )
            )
            session.add(
                ReservationRow(
                    provider="aws-east",
                    reservation_id=hostile("reservation"),
                    kind="reservation",
                    instance_type=hostile("reserved_type"),
                    zone=hostile("zone"),
                    total=4,
                    available=1,
                    state=hostile("reservation_state"),
                    templates=hostile("reservation_templates"),
                )
            )
    finally:
        database.dispose()


@dataclass(frozen=True)
class Filled:
    env: dict[str, str]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Filled:
    db = tmp_path_factory.mktemp("hostile") / "cm.db"
    env = {
        **os.environ,
        "CLUSTERMGR_CONFIG": str(EXAMPLE_CONFIG),
        "CLUSTERMGR_DB": f"sqlite:///{db}",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "4000",  # a table cell on one line, so each value can be looked for whole
    }
    upgrade = _clustermgr(env, "db", "upgrade")  # the schema through the migrations
    assert upgrade.returncode == 0, upgrade.stderr
    fill(f"sqlite:///{db}")
    return Filled(env)


def _clustermgr(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "clustermgr"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


NODE_FIELDS = [
    "state_reason",
    "template",
    "partitions",
    "instance_id",
    "instance_type",
    "private_address",
    "gpu_model",
    "slurm_state",
    "image_revision",
    "kernel",
]
TRANSFER_FIELDS = ["user", "error_in", "error_out", "stage_dir", "item_src", "item_dest"]
DIRECTOR_FIELDS = ["director_instance", "director_address", "director_reason", "health"]
STATUS_FIELDS = [
    "host",
    "cycle_summary",
    "template",
    "kernel",
    "foreign_id",
    "template_tag",
    "request_tag",
    "role_tag",
    "config_path",
    "reload_error",
]
# every read verb, and the hostile fields each shows (exit 0 unless listed in REFUSED)
VERBS: list[tuple[list[str], list[str]]] = [
    (["status"], STATUS_FIELDS),
    (["nodes", "list"], ["state_reason", "template", "instance_id", "kernel", "image_revision"]),
    (["nodes", "show", NODE], NODE_FIELDS),
    (["nodes", "history", NODE], ["event_reason", "actor"]),
    (["events", "--since", "1d"], ["event_reason", "actor"]),
    (["events", "--since", "1d", "--node", NODE], ["event_reason", "actor"]),
    (
        ["events", "--cluster", "--since", "1d"],
        ["kind", "source", "job_name", "comment", "features"],
    ),
    (["transfers", "list"], ["user", "error_in", "error_out"]),
    (["transfers", "show", "4242"], TRANSFER_FIELDS),
    (["directors", "list"], ["director_instance", "director_address", "image", "version"]),
    (
        ["directors", "show", DIRECTOR],
        [*DIRECTOR_FIELDS, "director_event", "image", "version", "replica_error", "ldap_attribute"],
    ),
    (["images", "status"], ["image", "version", "replica_error"]),
    (["ldap", "status"], ["ldap_attribute"]),
    (["catalog", "--provider", "aws-east"], ["type_name", "type_gpu"]),
    (
        ["catalog", "--provider", "aws-east", "--reservations"],
        ["reservation", "reserved_type"],
    ),
    (["templates", "list"], []),
    (["db", "current"], []),
    # errors that quote what the database holds: each a clear line, the value escaped
    (["events", "--cluster", "--kind", "no-such-kind"], ["kind"]),
    (["nodes", "list", "--template", "no-such-template"], ["template"]),
]
JSON_VERBS = [
    (argv, fields)
    for argv, fields in VERBS
    if argv[0] not in ("db",) and "no-such-kind" not in argv and "no-such-template" not in argv
]
REFUSED = {"no-such-kind", "no-such-template"}
# the filled head leads, but its last cycle failed: status says so with exit 1
UNHEALTHY = ["status"]


@pytest.mark.parametrize(("argv", "fields"), VERBS, ids=[" ".join(a) for a, _ in VERBS])
def test_every_read_verb_escapes_what_users_and_clouds_wrote(
    filled: Filled, argv: list[str], fields: list[str]
) -> None:
    done = _clustermgr(filled.env, *argv)
    if REFUSED & set(argv):
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    else:
        assert done.returncode == (1 if argv == UNHEALTHY else 0), done.stderr
    assert_safe(done, fields, as_json=False)


@pytest.mark.parametrize(("argv", "fields"), JSON_VERBS, ids=[" ".join(a) for a, _ in JSON_VERBS])
def test_json_carries_the_exact_value_ascii_encoded(
    filled: Filled, argv: list[str], fields: list[str]
) -> None:
    done = _clustermgr(filled.env, *argv, "--json")
    assert done.returncode == (1 if argv == UNHEALTHY else 0), done.stderr
    assert_safe(done, fields, as_json=True)


def test_a_users_transfer_error_reaches_root_escaped(
    lab: StageLab,  # noqa: F811 (the fixture imported above)
    accounts: Accounts,
    mallory_dir: Path,
) -> None:
    """Issue 33's report: a user finishes their own transfer with a hostile error, root
    reads it with `transfers show`/`list`; the user reads it back with `cmsub --status`."""
    mallory = accounts.attacker
    make_tree(mallory, mallory_dir)
    chain = submit(lab, mallory, mallory_dir)
    stage_in, _ = transfer_ids(lab, chain)
    number = int(stage_in.removeprefix("--transfer="))
    answer = lab.raw(
        mallory, {"op": "finish", "args": {"transfer": number, "error": hostile("error")}}
    )
    assert answer["ok"], answer
    env = {**os.environ, **lab.env, "COLUMNS": "4000"}
    job = str(chain["job"])
    for argv in (["transfers", "show", job], ["transfers", "list"]):
        assert_safe(_clustermgr(env, *argv), ["error"], as_json=False)
        assert_safe(_clustermgr(env, *argv, "--json"), ["error"], as_json=True)
    cmsub = [str(BIN / "cmsub"), "--status", job]
    status = as_user(mallory.name, cmsub, env={**lab.env, "COLUMNS": "4000"})
    assert status.returncode == 0, status.stderr
    assert_safe(status, ["error"], as_json=False)
    assert_safe(as_user(mallory.name, [*cmsub, "--json"], env=lab.env), ["error"], as_json=True)


def test_a_config_error_quoting_a_hostile_value_is_one_escaped_line(tmp_path: Path) -> None:
    """An error that echoes a config value (here a template's partition: a config another
    admin or a config-management tool wrote) prints it escaped, on one line."""
    toml_value = json.dumps(hostile("partition"))  # TOML basic strings take JSON's escapes
    text = EXAMPLE_CONFIG.read_text().replace(
        'partition = "gpu-cloud"', f"partition = {toml_value}", 1
    )
    config = tmp_path / "clustermgr.toml"
    config.write_text(text)
    env = {**os.environ, "CLUSTERMGR_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    done = _clustermgr(env, "config", "check", "--no-slurm")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""
    assert_safe(done, [], as_json=False)
    assert "partition|" in done.stderr and "[red]x[/red]" in done.stderr

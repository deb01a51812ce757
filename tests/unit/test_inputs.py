"""What outside values may hold where they enter: the validators, the one-line log
formatter, the squeue and sinfo parsers skipping one bad record, and the config refusing
values Slurm would split."""

from __future__ import annotations

import copy
import logging
import re
import sys
from typing import Any

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.core.inputs import escape_controls, is_host_address, slurm_word_problem
from clustermgr.core.logsafe import LOG_FORMAT, OneLineFormatter
from clustermgr.workload.base import reason_arg
from clustermgr.workload.slurm import parse_sinfo_nodes
from clustermgr.workload.slurmconf import render_slurm_conf
from clustermgr.workload.squeue import PENDING_FIELDS, parse_pending, parse_running

BASE: dict[str, Any] = {
    "providers": [{"name": "aws", "type": "aws", "region": "us-east-1"}],
    "templates": [
        {
            "name": "gpu",
            "provider": "aws",
            "instance_types": ["p4d.24xlarge"],
            "image": "ami-1",
            "partition": "cloud",
            "nodes": "gpu-[1-4]",
            "cpus": 4,
            "memory_mb": 1000,
            "gpus": 1,
            "gpu_model": "a100",
            "features": ["nvlink"],
        }
    ],
}
NEWLINE_DIRECTIVE = "cloud\nPrologSlurmctld=/tmp/evil"


def with_template(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["templates"][0].update(changes)
    return data


@pytest.mark.parametrize(
    "value",
    ["a100", "gpu-cloud", "us-east-1", "hall_a", "v1.2", "A"],
)
def test_slurm_names_that_slurm_takes(value: str) -> None:
    assert slurm_word_problem(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a b",
        "a\nb",
        "a#b",
        "a=b",
        "a,b",
        "a&b",
        "a|b",
        "-x",
        ".x",
        "a\u2028b",
        "a\x1cb",
        "a\x00b",
        "é",
        "x" * 129,
    ],
)
def test_slurm_names_that_slurm_would_split_or_misread(value: str) -> None:
    problem = slurm_word_problem(value)
    assert problem is not None and "\n" not in problem and "\u2028" not in problem


@pytest.mark.parametrize(
    "value", ["10.0.0.5", "fd00::5", "gpu-1", "node1.cluster.local", "a", "gpu-1.example."]
)
def test_addresses_that_may_reach_scontrol_ssh_rsync_and_ldap(value: str) -> None:
    assert is_host_address(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "1.2.3.4 nodehostname=evil",
        "-oProxyCommand=touch /tmp/x",
        "root@10.0.0.5",
        "10.0.0.5:22",
        "1.2.3.999",
        "fe80::1%eth0",
        "a..b",
        "bad-.example",
        "x" * 254,
        "10.0.0.5\n",
        "host/../x",
    ],
)
def test_addresses_refused(value: str) -> None:
    assert not is_host_address(value)


def test_escape_controls_makes_every_line_breaker_visible() -> None:
    hostile = "a\nb\rc\x1cd\x85e\u2028f\u2029g\x7fh\x00i\u202ej\tk"
    escaped = escape_controls(hostile)
    assert escaped == "a\\nb\\rc\\x1cd\\x85e\\u2028f\\u2029g\\x7fh\\x00i\\u202ej\\tk"
    assert len(escaped.splitlines()) == 1
    assert escape_controls("plain: ünïcode ok") == "plain: ünïcode ok"


def record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom\nINFO cm-scale: cycle forged")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("cm-scale", logging.WARNING, __file__, 1, message, args, info)


def test_log_records_are_one_line_whatever_a_name_holds() -> None:
    formatter = OneLineFormatter(LOG_FORMAT)
    name = "x.json\n2026-11-25 10:00:00,000 INFO cm-scale: cycle 0 launched"
    line = formatter.format(record("spool: %s: not JSON", name))
    assert len(line.split("\n")) == 1 and len(line.splitlines()) == 1
    assert "x.json\\n2026-11-25" in line
    for separator in ("\u2028", "\x1c", "\x85", "\r"):
        assert len(formatter.format(record("node %s", f"a{separator}b")).splitlines()) == 1


def test_a_traceback_keeps_its_lines_but_none_starts_a_record() -> None:
    text = OneLineFormatter(LOG_FORMAT).format(record("cycle failed", exc=True))
    first, *rest = text.split("\n")
    assert "cycle failed" in first and rest
    assert all(line.startswith("  ") for line in rest), text
    assert "boom\\nINFO cm-scale: cycle forged" in text


def test_a_reason_reaches_scontrol_as_one_argument_without_controls() -> None:
    arg = reason_arg('bad\x00 "quote"\nstate=RESUME\u2028x')
    assert arg == "reason=\"bad 'quote' state=RESUME x\""


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partition", NEWLINE_DIRECTIVE),
        ("partition", "cloud gpu"),
        ("features", ["nvlink\nPrologSlurmctld=/tmp/evil"]),
        ("features", ["a#b"]),
        ("gpu_model", "a100\nPrologSlurmctld=/tmp/evil"),
        ("gpu_model", "a100 x"),
        ("nodes", "gpu-[1-2]\nPrologSlurmctld=/tmp/evil"),
        ("nodes", "gpu-[1-2] State=FUTURE"),
    ],
)
def test_config_refuses_template_values_slurm_would_split(field: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(with_template(**{field: value}), source="site.toml")
    message = str(caught.value)
    assert message.startswith("site.toml: templates[0:gpu]"), message
    assert field in message and "\n" not in message and "letters, digits" in message


def test_config_refuses_a_region_partition_or_hook_path_slurm_would_split() -> None:
    data = copy.deepcopy(BASE)
    data["providers"][0]["region"] = "us-east-1\nx"
    with pytest.raises(ConfigError, match=r"^c.toml: providers\[0:aws\].region: "):
        parse_settings(data, source="c.toml")
    data = copy.deepcopy(BASE) | {"slurm": {"onprem_partitions": ["a b"]}}
    with pytest.raises(ConfigError, match=r"^c.toml: slurm.onprem_partitions: 'a b' is not"):
        parse_settings(data, source="c.toml")
    data = copy.deepcopy(BASE) | {"slurm": {"hook_path": "/usr/bin/x y"}}
    with pytest.raises(ConfigError, match=r"^c.toml: slurm.hook_path: .* absolute path"):
        parse_settings(data, source="c.toml")


def test_slurm_conf_is_never_printed_with_a_control_character() -> None:
    """Defense in depth: values that got past validation (built without it) stop the output."""
    settings = parse_settings(with_template())
    template = settings.templates[0].model_copy(update={"partition": NEWLINE_DIRECTIVE})
    bypassed = Settings.model_construct(**{**dict(settings), "templates": [template]})
    with pytest.raises(ConfigError, match="would hold a control character") as caught:
        render_slurm_conf(bypassed)
    assert "\n" not in str(caught.value)
    assert any("Features=nvlink," in line for line in render_slurm_conf(settings))


def pending_line(job_id: str = "12", features: str = "(null)", tres: str = "cpu=4,node=1") -> str:
    values = {
        "JobArrayID": job_id,
        "ArrayTaskID": "N/A",
        "Partition": "cloud",
        "NumNodes": "1",
        "NumTasks": "1",
        "tres-alloc": tres,
        "tres-per-node": "gres:gpu:1",
        "tres-per-job": "",
        "tres-per-task": "N/A",
        "Feature": features,
        "TimeLimit": "1:00:00",
        "SubmitTime": "2026-11-23T00:00:00",
        "StartTime": "N/A",
        "UserName": "alice",
        "Requeue": "1",
        "Reason": "Resources",
    }
    return "\t".join(values[name] for name in PENDING_FIELDS)


@pytest.mark.parametrize("separator", ["\u2028", "\x1c", "\x1d", "\x1e", "\x85", "\u2029"])
def test_a_feature_with_a_line_separator_is_that_job_s_own_business(separator: str) -> None:
    text = "\n".join(
        [pending_line("11"), pending_line("12", f"a{separator}b"), pending_line("13"), ""]
    )
    jobs = parse_pending(text)
    assert [j.job_id for j in jobs] == ["11", "12", "13"]
    assert jobs[1].features == (f"a{separator}b",)


def test_one_bad_pending_line_is_skipped_with_a_warning_naming_its_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "\n".join(
        [
            pending_line("11"),
            pending_line("12", tres="cpu=4,node=many"),
            pending_line("13", tres="cpu=4,mem=" + "9" * 400 + "M"),
            "14\tcloud",
            pending_line("15\x00x"),
            pending_line("16"),
        ]
    )
    with caplog.at_level(logging.WARNING, "clustermgr.workload"):
        jobs = parse_pending(text)
    assert [j.job_id for j in jobs] == ["11", "16"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 4
    assert warnings[0].startswith("squeue pending line 2 (job 12) skipped: cannot parse")
    assert warnings[1].startswith("squeue pending line 3 (job 13) skipped")
    assert warnings[2].startswith("squeue pending line 4 (job 14) skipped: 2 fields")
    assert "not a job id" in warnings[3]


def test_many_bad_lines_are_named_a_few_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    text = "\n".join([pending_line(str(n), tres="node=x") for n in range(1, 21)])
    with caplog.at_level(logging.WARNING, "clustermgr.workload"):
        assert parse_pending(text) == []
    assert len(caplog.records) == 6
    assert caplog.records[-1].getMessage() == "squeue pending: 15 more lines skipped (20 in all)"


def test_a_running_job_with_a_bad_node_list_is_skipped_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "7\tgpu-[1-\t2026-11-23T10:00:00\n8\tgpu-[1-2]\t2026-11-23T10:00:00\n"
    with caplog.at_level(logging.WARNING, "clustermgr.workload"):
        jobs = parse_running(text)
    assert [(j.job_id, j.nodes) for j in jobs] == [("8", ("gpu-1", "gpu-2"))]
    assert "(job 7) skipped: node list 'gpu-[1-'" in caplog.records[0].getMessage()


def test_one_bad_sinfo_record_is_skipped_and_the_other_nodes_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = {"name": "gpu-1", "state": ["IDLE"], "state_flags": ["CLOUD"], "cpus": 4}
    data = {
        "nodes": [
            {"state": ["IDLE"]},
            "not a record",
            {**good, "name": "gpu-2\nPrologSlurmctld=/tmp/evil"},
            {**good, "name": "gpu-3", "partitions": 7},
            good,
        ]
    }
    with caplog.at_level(logging.WARNING, "clustermgr.workload"):
        nodes = parse_sinfo_nodes(data)
    assert list(nodes) == ["gpu-1"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4
    assert "record 1 skipped: it has no name" in messages[0]
    assert (
        "record 3 skipped: 'gpu-2\\nPrologSlurmctld=/tmp/evil' is not a Slurm name" in (messages[2])
    )
    assert messages[3].startswith("`sinfo --json` node gpu-3 skipped")


def ldap(**head: Any) -> dict[str, Any]:
    return {
        "suffix": "dc=example,dc=org",
        "bases": ["ou=people,dc=example,dc=org"],
        "head": {
            "bind_dn": "cn=replicator,dc=example,dc=org",
            "credentials": {"source": "password_env", "secret_env": "HEAD_PW"},
            **head,
        },
        "replica": {
            "admin_dn": "cn=admin,cn=config",
            "credentials": {"source": "password_env", "secret_env": "REPLICA_PW"},
        },
    }


def test_ldap_uses_tls_unless_told_not_to_and_config_check_warns_then() -> None:
    plain = parse_settings({"ldap": ldap(uri="ldap://head:389")}).ldap
    assert plain is not None
    assert (plain.head.tls, plain.replica.tls) == ("starttls", "starttls")
    assert plain.clear_text_warnings() == []
    secure = parse_settings({"ldap": ldap(uri="ldaps://head:636")}).ldap
    assert secure is not None and secure.head.tls == "ldaps"
    data = ldap(uri="ldap://head:389", tls="none")
    data["replica"]["tls"] = "none"
    clear = parse_settings({"ldap": data}).ldap
    assert clear is not None
    head_warning, replica_warning = clear.clear_text_warnings()
    assert head_warning.startswith('warning: ldap.head.tls = "none": the head\'s bind password')
    assert replica_warning.startswith('warning: ldap.replica.tls = "none"')


def test_tables_for_admins_show_control_characters_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from clustermgr.cli.output import emit_fields, emit_table

    hostile = "x.json\x1b]0;owned\x07\nINFO forged"
    emit_table([{"message": hostile}], ["message"], "Events")
    emit_fields({"message": hostile})
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x07" not in shown
    assert not any(line.startswith("INFO forged") for line in shown.split("\n"))
    assert shown.count("x.json\\x1b]0;owned\\x07\\nINFO forged") == 2


def test_config_refuses_staging_partitions_and_features_slurm_would_split() -> None:
    region = {"provider": "aws", "partition": "cloud", "features": ["aws"]}
    for change, where in [
        ({"partition": "cloud --wrap=id"}, "staging.regions[0].partition"),
        ({"features": ["aws&x"]}, "staging.regions[0].features"),
    ]:
        data = copy.deepcopy(BASE) | {"staging": {"regions": [region | change]}}
        with pytest.raises(ConfigError, match=rf"^c.toml: {re.escape(where)}: .* Slurm name"):
            parse_settings(data, source="c.toml")
    data = copy.deepcopy(BASE) | {"staging": {"data_mover_partition": "movers\n#"}}
    with pytest.raises(ConfigError, match=r"^c.toml: staging.data_mover_partition: "):
        parse_settings(data, source="c.toml")


def test_a_node_row_in_an_unknown_state_is_refused_a_transition_with_one_line() -> None:
    from clustermgr.core.errors import IllegalTransitionError
    from clustermgr.db.models import Node
    from clustermgr.nodes.states import NodeState, power_of, transition

    row = Node(name="gpu-3", kind="cloud", state="EXPLODED")
    with pytest.raises(IllegalTransitionError) as caught:
        transition(row, NodeState.UP, "test", "test")
    assert str(caught.value).startswith("node gpu-3: state 'EXPLODED' in the database is not")
    assert row.state == "EXPLODED" and power_of("EXPLODED") == "-"

"""Nova's multi-create (`min_count`/`max_count` on one `POST /servers`) for FakeOpenStack, as
Debian 12's nova 26.2.2 ("Zed", python3-nova) does it:

- nova/api/openstack/compute/servers.py `create`: min_count defaults to 1, max_count to
  min_count, min_count > max_count is 400 "min_count must be <= max_count";
  `return_reservation_id` true answers {"reservation_id": ...} instead of the first server;
- nova/compute/api.py `_check_num_instances_quota`: the count is cut to what the quota
  allows, and fewer than min_count is the 403 quota refusal; `_provision_instances` gives
  every server of the request one reservation id (`utils.generate_uid('r')`: "r-" and 8
  characters of [0-9a-z]); `_populate_instance_names` names them `<name>-<index + 1>` when
  more than one is made (the old `multi_instance_display_name_template` option is gone);
- nova/scheduler/manager.py `_ensure_sufficient_hosts`: fewer hosts than instances in the
  request raises NoValidHost ("There are not enough hosts available.") for the whole
  request, and nova/conductor/manager.py `schedule_and_build_instances` then buries every
  server of it in cell0 (`_bury_in_cell0`): all ERROR, each with the NoValidHost fault;
- `reservation_id` is one of the list filters a project member may use
  (servers.py `_get_server_search_options`);
- nova/compute/api.py `update_instance_metadata` is `check_instance_state(vm_state=[ACTIVE,
  PAUSED, SUSPENDED, STOPPED], task_state=None)`: while a server builds, setting its
  metadata is 409 "Cannot 'update_metadata' instance ... while it is in vm_state building"
  (nova/api/openstack/common.py `raise_http_conflict_for_instance_invalid_state`), while
  renaming it (`PUT /servers/{id}`, `update_instance`) works in any state.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any

RESERVATION_CHARS = string.digits + string.ascii_lowercase


class CountError(ValueError):
    """A 400 on min_count/max_count, with Nova's message."""


@dataclass(frozen=True)
class Counts:
    least: int  # min_count
    most: int  # max_count

    def allowed(self, room: int | None) -> int | None:
        """How many the quota lets this request make (None: fewer than min_count fit)."""
        if room is None:
            return self.most
        made = min(self.most, room)
        return made if made >= self.least else None


def counts(spec: dict[str, Any]) -> Counts:
    least = _positive(spec, "min_count", 1)
    most = _positive(spec, "max_count", least)
    if least > most:
        raise CountError("min_count must be <= max_count")
    return Counts(least, most)


def _positive(spec: dict[str, Any], key: str, default: int) -> int:
    value = spec.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise CountError(f"Invalid input for field/attribute {key}.") from None
    if number < 1 or isinstance(value, bool):
        raise CountError(f"Invalid input for field/attribute {key}.")
    return number


def reservation_id() -> str:
    return "r-" + "".join(secrets.choice(RESERVATION_CHARS) for _ in range(8))


def name_of(name: str, count: int, index: int) -> str:
    """The display name of server `index` (0-based) of a request for `count` servers."""
    return f"{name}-{index + 1}" if count > 1 else name


def metadata_refused(server_id: str) -> str:
    return f"Cannot 'update_metadata' instance {server_id} while it is in vm_state building"

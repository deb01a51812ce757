"""What Nova and Neutron raise, with the ErrorKind each is and why.

Read from the Zed sources Debian 12 ships (python3-nova 26.2.2, python3-neutron 21,
python3-neutron-lib 3.1; `.ci/install-debs`), which tests/unit/test_nova_neutron_codes.py
reads again to check every row.

Nova never names its exception in an answer: nova/api/openstack/compute/servers.py turns
each into an HTTP error whose body is `{"forbidden": {"code": 403, "message": ...}}` (and
nova/compute/utils.py `exception_to_dict` makes a failed build's server `fault`
`{"code": 500 or the exception's own, "message": ...}`), the message being the exception's
`msg_fmt`. So a Nova row is found by its HTTP status (or fault code) and a fixed part of its
`msg_fmt` (`text`): the one place the service puts the meaning. Rows are tried in order, a
cause before what wraps it (`NoMoreFixedIps` inside `BuildAbortException`). An answer that
matches no row is read by its HTTP status (errors.py).

Neutron does name it: neutron/api/api_common.py `get_exception_data` answers
`{"NeutronError": {"type": <exception class>, "message": ..., "detail": ""}}`, so a Neutron
row is found by `type`.

Running out of network resources is never OTHER or INVALID: a quota on ports, security
groups or floating IPs is QUOTA; a subnet or an external network without a free address is
CAPACITY (another network or template may have one).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustermgr.core.errors import ErrorKind, ErrorRow

CAPACITY, QUOTA, THROTTLED = ErrorKind.CAPACITY, ErrorKind.QUOTA, ErrorKind.THROTTLED
AUTH, TRANSIENT, INVALID = ErrorKind.AUTH, ErrorKind.TRANSIENT, ErrorKind.INVALID
OTHER = ErrorKind.OTHER


@dataclass(frozen=True)
class NovaRow:
    """A Nova exception as it reaches cm-scale: the HTTP status of the answer (or the code of
    a server fault) and a fixed part of its message, found in `seen_in` (its `msg_fmt` in
    nova/exception.py unless another file formats it)."""

    exception: str
    status: int
    kind: ErrorKind
    why: str
    text: str
    seen_in: str = "nova/exception.py"

    @property
    def code(self) -> str:
        return self.exception


NOVA_EXCEPTIONS: tuple[NovaRow, ...] = (
    # -- the network ran out (a server fault 500, inside "Build of instance ... aborted: Failed
    # to allocate the network(s) with error ..., not rescheduling.", nova/compute/manager.py)
    NovaRow(
        "NoMoreFixedIps",
        500,
        CAPACITY,
        "the network's subnets have no free address (Neutron's IpAddressGenerationFailure)",
        "No fixed IP addresses available for network",
    ),
    NovaRow("NoValidHost", 500, CAPACITY, "the scheduler found no host", "No valid host was found"),
    NovaRow(
        "MaxRetriesExceeded",
        500,
        OTHER,
        "every host failed to build it: a broken image or host, not a full cloud",
        "Exceeded maximum number of retries",
    ),
    NovaRow(
        "BuildAbortException",
        500,
        OTHER,
        "the build failed for a reason of its own (image, volume, port binding)",
        "aborted: ",
    ),
    NovaRow(
        "TooManyInstances",
        413,
        QUOTA,
        "the conductor's quota recheck after scheduling (the server stays in ERROR)",
        "Quota exceeded for ",
    ),
    # -- refused at the API: OverQuota and its kin, all HTTPForbidden (403)
    NovaRow(
        "PortLimitExceeded",
        403,
        QUOTA,
        "the project's Neutron port quota (compute/api.py: no port left for one server)",
        "Maximum number of ports exceeded",
    ),
    NovaRow(
        "PortLimitExceeded",
        403,
        QUOTA,
        "ports defined already over the quota (network/neutron.py validate_networks)",
        "is over the limit: ",
        "nova/network/neutron.py",
    ),
    NovaRow(
        "SecurityGroupLimitExceeded",
        403,
        QUOTA,
        "the project's security group (or rule) quota",
        "Maximum number of security groups or rules exceeded",
    ),
    NovaRow(
        "FloatingIpLimitExceeded",
        403,
        QUOTA,
        "the project's floating IP quota",
        "Maximum number of floating IPs exceeded",
    ),
    NovaRow(
        "MetadataLimitExceeded",
        403,
        QUOTA,
        "the metadata_items quota",
        "Maximum number of metadata items exceeds",
    ),
    NovaRow("OnsetFileLimitExceeded", 403, QUOTA, "the injected files quota", "Personality file"),
    NovaRow(
        "KeypairLimitExceeded", 403, QUOTA, "the key pairs quota", "Quota exceeded, too many key"
    ),
    NovaRow(
        "ServerGroupLimitExceeded",
        403,
        QUOTA,
        "the server groups quota",
        "Quota exceeded, too many server groups",
    ),
    NovaRow(
        "GroupMemberLimitExceeded",
        403,
        QUOTA,
        "the server group members quota",
        "Quota exceeded, too many servers in group",
    ),
    NovaRow("OverQuota", 403, QUOTA, "any other quota", "Quota exceeded for resources"),
    NovaRow(
        "TooManyInstances",
        403,
        QUOTA,
        "the instances / cores / ram quota",
        "Quota exceeded for ",
    ),
    NovaRow(
        "ExternalNetworkAttachForbidden",
        403,
        INVALID,
        "policy: the template names an external network",
        "It is not allowed to create an interface on external network",
    ),
    NovaRow(
        "BootFromVolumeRequiredForZeroDiskFlavor",
        403,
        INVALID,
        "policy: a flavor with no disk needs a boot volume",
        "Only volume-backed servers are allowed for flavors with",
    ),
    # -- 404: a floating IP pool with nothing left is exhaustion, not a missing thing
    NovaRow(
        "NoMoreFloatingIps", 404, CAPACITY, "the floating IP pool is empty", "Zero floating IPs"
    ),
    # -- 409 on create (HTTPConflict)
    NovaRow(
        "NetworkAmbiguous",
        409,
        INVALID,
        "several networks and the template names none",
        "More than one possible network found",
    ),
    NovaRow(
        "PortInUse", 409, TRANSIENT, "a port still held by a server going away", "is still in use"
    ),
)

NEUTRON_TYPES: tuple[ErrorRow, ...] = (
    ErrorRow("OverQuota", QUOTA, "a project quota: ports, security groups, floating IPs, ..."),
    ErrorRow("SubnetPoolQuotaExceeded", QUOTA, "the project's subnet pool prefix quota"),
    ErrorRow("IpAddressGenerationFailure", CAPACITY, "no free address on the network's subnets"),
    ErrorRow("ExternalIpAddressExhausted", CAPACITY, "no free address on the external network"),
    ErrorRow("NoNetworkAvailable", CAPACITY, "no tenant network segment left to allocate"),
    ErrorRow("ResourceExhausted", CAPACITY, "a resource pool of the cloud is used up"),
    ErrorRow("NetworkMacAddressGenerationFailure", TRANSIENT, "no unique MAC found this time"),
    ErrorRow("HostMacAddressGenerationFailure", TRANSIENT, "no unique MAC found this time"),
    ErrorRow("MacAddressInUse", TRANSIENT, "the MAC is still held by a port going away"),
    ErrorRow("IpAddressInUse", TRANSIENT, "the address is still held by a port going away"),
    ErrorRow("IpAddressAlreadyAllocated", TRANSIENT, "the address is still allocated (IPAM)"),
    ErrorRow("PortInUse", TRANSIENT, "the port is still bound to a device"),
    ErrorRow("InUse", TRANSIENT, "the resource is still in use"),
    ErrorRow("Conflict", TRANSIENT, "a concurrent change"),
    ErrorRow("ServiceUnavailable", TRANSIENT, "the service could not answer"),
    ErrorRow("NotAuthorized", AUTH, "the policy does not allow the call"),
    ErrorRow("NetworkNotFound", INVALID, "the template's network does not exist"),
    ErrorRow("SubnetNotFound", INVALID, "the subnet does not exist"),
    ErrorRow("PortNotFound", INVALID, "the port does not exist"),
    ErrorRow("InvalidInput", INVALID, "a request field Neutron rejects"),
    ErrorRow("BadRequest", INVALID, "a request Neutron rejects"),
)
NEUTRON_KINDS: dict[str, ErrorKind] = {row.code: row.kind for row in NEUTRON_TYPES}


def nova_row(status: int | None, message: str) -> NovaRow | None:
    """The first Nova row of this status whose text is in `message` (None: no row)."""
    return next((r for r in NOVA_EXCEPTIONS if r.status == status and r.text in message), None)

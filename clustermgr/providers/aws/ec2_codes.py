"""Every EC2 error code the calls cm-scale makes can answer, with its ErrorKind and why.

The calls: RunInstances, CreateFleet (its own error and each `Errors` / `errorSet` entry of
its answer), CreateTags, Create/Describe/DeletePlacementGroup(s),
DescribeCapacityReservations and launches targeting a reservation, DescribeInstances,
DescribeInstanceTypes, DescribeImages, CopyImage, the launch-template calls and
TerminateInstances.

Where the list comes from: EC2's API reference "Error codes for the Amazon EC2 API"
(docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html: common client errors,
client errors for specific actions, server errors). botocore ships no error list, and the
page itself could not be read from here: the rows are that page's codes as they are quoted
by gardener/machine-controller-manager-provider-aws pkg/aws/errors/codes.go (the limit and
capacity codes with the page's wording), aws/aws-parallelcluster-node PR #673
(UnfulfillableCapacity, InsufficientCapacity), karpenter-provider-aws's
unfulfillableCapacityErrorCodes (the CreateFleet entry codes), EC2's "Troubleshooting API
request errors" page (UnauthorizedOperation, RequestLimitExceeded) and the codes moto
answers (moto/ec2/exceptions.py), each kept only for the calls above.

How a code is read (errors.py `kind_of`): as is, then without a `Server.` / `Client.`
prefix, then by its family before the first dot (`InvalidAMIID.Unavailable` ->
`InvalidAMIID`). Account limits are QUOTA; "no capacity for this request", in any of EC2's
wordings, is CAPACITY (the next type, zone or template may have it).
"""

from __future__ import annotations

from clustermgr.core.errors import ErrorKind, ErrorRow

CAPACITY, QUOTA, THROTTLED = ErrorKind.CAPACITY, ErrorKind.QUOTA, ErrorKind.THROTTLED
AUTH, TRANSIENT, INVALID = ErrorKind.AUTH, ErrorKind.TRANSIENT, ErrorKind.INVALID

EC2_CODES: tuple[ErrorRow, ...] = (
    # -- no capacity for this request: another type, zone or template may have it
    ErrorRow(
        "InsufficientInstanceCapacity", CAPACITY, "not enough capacity of this type in the zone"
    ),
    ErrorRow("InsufficientCapacity", CAPACITY, "not enough capacity to fulfil the request"),
    ErrorRow(
        "UnfulfillableCapacity", CAPACITY, "no spare (Spot) capacity for the request right now"
    ),
    ErrorRow("InsufficientHostCapacity", CAPACITY, "not enough Dedicated Host capacity"),
    ErrorRow(
        "InsufficientCapacityOnHost", CAPACITY, "the targeted host has no room for the instance"
    ),
    ErrorRow(
        "InsufficientReservedInstanceCapacity", CAPACITY, "not enough Reserved Instance capacity"
    ),
    ErrorRow(
        "InsufficientAddressCapacity", CAPACITY, "EC2 has no more addresses of the kind asked"
    ),
    ErrorRow(
        "InsufficientVolumeCapacity", CAPACITY, "no EBS capacity for the root volume in the zone"
    ),
    ErrorRow(
        "VolumeTypeNotAvailableInZone", CAPACITY, "the volume type is not offered in this zone"
    ),
    ErrorRow("ReservationCapacityExceeded", CAPACITY, "the targeted capacity reservation is full"),
    ErrorRow("Unsupported", CAPACITY, "the type is not offered in the requested zone"),
    ErrorRow("SpotMaxPriceTooLow", CAPACITY, "the Spot price is above the maximum price set"),
    ErrorRow("InsufficientFreeAddressesInSubnet", CAPACITY, "the subnet has no free address"),
    # -- account limits
    ErrorRow("InstanceLimitExceeded", QUOTA, "the account's On-Demand instance limit"),
    ErrorRow("VcpuLimitExceeded", QUOTA, "the account's vCPU limit for the instance family"),
    ErrorRow("MaxSpotInstanceCountExceeded", QUOTA, "the account's Spot instance limit"),
    ErrorRow("MaxSpotFleetRequestCountExceeded", QUOTA, "the account's Spot Fleet request limit"),
    ErrorRow("MaxFleetCountExceeded", QUOTA, "the account's EC2 Fleet limit"),
    ErrorRow("ResourceLimitExceeded", QUOTA, "an account limit on a resource the call makes"),
    ErrorRow("NetworkInterfaceLimitExceeded", QUOTA, "the account's network interface limit"),
    ErrorRow("SecurityGroupLimitExceeded", QUOTA, "the account's security group limit"),
    ErrorRow("VolumeLimitExceeded", QUOTA, "the account's EBS storage limit"),
    ErrorRow("MaxIOPSLimitExceeded", QUOTA, "the account's provisioned IOPS limit in the Region"),
    ErrorRow("PendingVerification", QUOTA, "a new account may not launch until AWS verifies it"),
    # -- throttling
    ErrorRow("RequestLimitExceeded", THROTTLED, "the account's API request rate (per Region)"),
    ErrorRow("Throttling", THROTTLED, "STS and other query services' rate limit"),
    ErrorRow("ThrottlingException", THROTTLED, "the JSON services' rate limit"),
    # -- credentials and permissions
    ErrorRow("AuthFailure", AUTH, "the credentials could not be validated"),
    ErrorRow("UnauthorizedOperation", AUTH, "the IAM policy does not allow the call"),
    ErrorRow("InvalidClientTokenId", AUTH, "the access key id is unknown"),
    ErrorRow("SignatureDoesNotMatch", AUTH, "the secret key does not match the key id"),
    ErrorRow("IncompleteSignature", AUTH, "the request signature is not complete"),
    ErrorRow("MissingAuthenticationToken", AUTH, "the request carried no credentials"),
    ErrorRow("ExpiredToken", AUTH, "the session token has expired"),
    ErrorRow("RequestExpired", AUTH, "the request's timestamp is too old (clock or token)"),
    ErrorRow("AccessDenied", AUTH, "STS / IAM refused the caller"),
    ErrorRow("OptInRequired", AUTH, "the account is not subscribed to the service or Region"),
    ErrorRow("Blocked", AUTH, "the account is blocked"),
    # -- the request itself is wrong
    ErrorRow("InvalidParameterValue", INVALID, "a parameter's value is not valid"),
    ErrorRow("InvalidParameterCombination", INVALID, "parameters that may not be used together"),
    ErrorRow("InvalidParameter", INVALID, "a parameter that is not valid for the call"),
    ErrorRow("MissingParameter", INVALID, "a required parameter is missing"),
    ErrorRow("UnknownParameter", INVALID, "a parameter EC2 does not know"),
    ErrorRow("InvalidQueryParameter", INVALID, "the query is malformed"),
    ErrorRow("MalformedQueryString", INVALID, "the query string is malformed"),
    ErrorRow("ValidationError", INVALID, "the input fails a constraint"),
    ErrorRow(
        "InvalidAction", INVALID, "no such action at this endpoint (RunInstances replaces a fleet)"
    ),
    ErrorRow(
        "UnsupportedOperation", INVALID, "the operation is not supported (here, for this type)"
    ),
    ErrorRow("UnsupportedInstanceAttribute", INVALID, "the attribute is not supported"),
    ErrorRow("OperationNotPermitted", INVALID, "the operation is not allowed on this resource"),
    ErrorRow("IdempotentParameterMismatch", INVALID, "a client token reused with other parameters"),
    ErrorRow("InvalidID", INVALID, "a resource id that is not valid"),
    ErrorRow("InvalidAMIID", INVALID, "the image id: .Malformed, .NotFound, .Unavailable"),
    ErrorRow("InvalidBlockDeviceMapping", INVALID, "the template's block device mapping"),
    ErrorRow("InvalidInstanceType", INVALID, "no such instance type"),
    ErrorRow("InvalidSubnetID", INVALID, "the subnet: .NotFound, .Malformed"),
    ErrorRow("InvalidGroup", INVALID, "the security group: .NotFound"),
    ErrorRow("InvalidGroupId", INVALID, "the security group id: .Malformed"),
    ErrorRow("InvalidSecurityGroupID", INVALID, "the security group id: .NotFound"),
    ErrorRow("InvalidKeyPair", INVALID, "the key pair: .NotFound, .Format"),
    ErrorRow("InvalidLaunchTemplateName", INVALID, "the launch template name: .NotFoundException"),
    ErrorRow("InvalidLaunchTemplateId", INVALID, "the launch template id or version"),
    ErrorRow("InvalidPlacementGroup", INVALID, "the placement group: .Unknown, .Duplicate"),
    ErrorRow("InvalidCapacityReservationId", INVALID, "the capacity reservation: .NotFound"),
    ErrorRow("InvalidNetworkInterfaceID", INVALID, "the network interface: .NotFound"),
    ErrorRow("InvalidVpcID", INVALID, "the VPC: .NotFound"),
    ErrorRow("InvalidZone", INVALID, "the availability zone: .NotFound"),
    ErrorRow("InvalidUserData", INVALID, "the user data: .Malformed"),
    ErrorRow("InvalidTagKey", INVALID, "a tag key: .Malformed"),
    ErrorRow("TagLimitExceeded", INVALID, "more tags than a resource may carry (50)"),
    ErrorRow("TagPolicyViolation", INVALID, "the tags break the organization's tag policy"),
    ErrorRow(
        "AttachmentLimitExceeded", INVALID, "more volumes / interfaces than the instance takes"
    ),
    ErrorRow(
        "PrivateIpAddressLimitExceeded", INVALID, "more addresses than an interface of the type"
    ),
    ErrorRow("InvalidInstanceID.Malformed", INVALID, "an instance id that is not one"),
    # -- worth another try later
    ErrorRow(
        "InvalidInstanceID.NotFound", TRANSIENT, "a new instance not yet visible (consistency)"
    ),
    ErrorRow("InvalidPlacementGroup.InUse", TRANSIENT, "a placement group still holding instances"),
    ErrorRow("DependencyViolation", TRANSIENT, "a resource still in use by another"),
    ErrorRow("IncorrectInstanceState", TRANSIENT, "the instance is changing state"),
    ErrorRow("IncorrectState", TRANSIENT, "the resource is changing state"),
    ErrorRow("ConcurrentTagAccess", TRANSIENT, "another call is changing the same tags"),
    ErrorRow("InternalError", TRANSIENT, "an internal error (Server.InternalError)"),
    ErrorRow("InternalFailure", TRANSIENT, "an internal failure"),
    ErrorRow("ServiceUnavailable", TRANSIENT, "the service could not answer"),
    ErrorRow("Unavailable", TRANSIENT, "the service is overloaded"),
)

# botocore's own exceptions (no answer from AWS), by class name.
BOTOCORE_EXCEPTIONS: tuple[ErrorRow, ...] = (
    ErrorRow("NoCredentialsError", AUTH, "nothing in the credential chain"),
    ErrorRow("PartialCredentialsError", AUTH, "a credential source missing a part"),
    ErrorRow("ProfileNotFound", AUTH, "the named profile is in no config file"),
    ErrorRow("CredentialRetrievalError", AUTH, "a credential process or role failed"),
    ErrorRow("TokenRetrievalError", AUTH, "the SSO token could not be read"),
    ErrorRow("ParamValidationError", INVALID, "rejected before sending"),
    ErrorRow("NoRegionError", INVALID, "no region configured"),
    ErrorRow("EndpointConnectionError", TRANSIENT, "no connection to the endpoint"),
    ErrorRow("ConnectTimeoutError", TRANSIENT, "the connection timed out"),
    ErrorRow("ReadTimeoutError", TRANSIENT, "no answer within the read timeout"),
    ErrorRow("ConnectionClosedError", TRANSIENT, "the connection closed mid-answer"),
)

"""Cloud providers behind one seam.

Layout. `base.py` is the seam: the `Provider` Protocol and the typed data that crosses it
(LaunchSpec, LaunchResult, LaunchError, CloudInstance, InstanceType, CheckResult, the TAG_*
keys, `ours()` and `invalid()`). `registry.py` finds a provider class by type, from the kind
its package declares (`clustermgr.core.kinds`, the `clustermgr.providers` entry points). Each
provider is a package, `aws/`, `azure/`, `openstack/` and `local/` (and `bmc/` for on-prem
power), split the same way:

- `client.py`: builds the SDK clients (lazily, shared by the provider's threads) and says
  where the credentials come from (`credential_source()`, never the credentials);
- `errors.py`: the one table from the SDK's error codes to ErrorKind, `classify(exc)` ->
  `Failure`, and `SDK` (the SDK's exception classes + classify) for the skeleton;
- `shapes.py`: pure functions and dataclasses: request bodies, names, answers -> CloudInstance
  / InstanceType; no SDK calls;
- `provider.py`: the provider class;
- `kind.py`: the package's `ProviderKind` (clustermgr/core/kinds.py), no SDK import: type name,
  provider class, credential sources, billing, capabilities, keys or options model, SDK
  loggers, pip extra. The `clustermgr.providers` entry point names it.

Only `client.py` and `errors.py` import their SDK. OpenStack adds `launch.py` (creation
rounds; it asks for the provider as the `Nova` protocol and does not import it); local adds
`net.py` (namespaces, bridge, slurmd processes) and `state.py` (its "cloud API" state files).

`skeleton.py` holds what the clouds share: `CloudProvider` runs the launch (`prepare` validates
the spec and resolves what it names, INVALID/AUTH raised, other failures returned as a
LaunchError; `start` launches; errors are merged per kind/code/type/zone), caches the catalog
with one TTL, runs `check()` (credentials first, then each check in its own try/except),
de-duplicates `terminate()`, and turns SDK exceptions into one-line ProviderErrors whose AUTH
message names the credential source. `Failure` is the one classified-failure type,
`merge_errors`, `parallel` and `TtlCache` are shared helpers.

Adding a provider: make `clustermgr/providers/<name>/` with the four modules; in `errors.py`
map the SDK's codes and declare `SDK = Sdk(exception classes, classify)`; subclass
`CloudProvider[YourPlan]` with `kind`, `sdk` (and `words` for what the cloud calls an instance
and an instance type), and write `credential_source`, `prepare`, `start`, `read_catalog`,
`list_instances`, `remove`, `check_credentials` and `checks`. Declare its
kind in `kind.py` and name it in the `clustermgr.providers` entry-point group (clustermgr's
pyproject.toml for a built-in, the package's own for an outside one): nothing else names
the type (tests/fixtures/outside_provider is a whole outside provider).
"""

"""Instance-type facts cached in the database, with hourly prices from the config.

`clustermgr providers catalog` reads instance types from here, so nothing asks a cloud API
what an instance type is on a command's path. Prices and billing rules live in pricing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from clustermgr.config import Settings
from clustermgr.core.pricing import Price
from clustermgr.db.models import InstanceTypeRow
from clustermgr.providers.base import InstanceType


def configured_prices(settings: Settings, provider: str) -> dict[str, Price]:
    """Hourly prices per instance type from the templates of one provider."""
    prices: dict[str, Price] = {}
    for template in settings.templates:
        if template.provider != provider:
            continue
        prices.update(template.price_table)
    return prices


def store_catalog(
    session: Session, settings: Settings, provider: str, types: Sequence[InstanceType]
) -> int:
    """Replace one provider's cached catalog; returns the number of types stored."""
    now = datetime.now(UTC)
    prices = configured_prices(settings, provider)
    session.execute(delete(InstanceTypeRow).where(InstanceTypeRow.provider == provider))
    for itype in types:
        price = prices.get(itype.name, Price(None, None))
        session.add(
            InstanceTypeRow(
                provider=provider,
                name=itype.name,
                vcpus=itype.vcpus,
                memory_mb=itype.memory_mb,
                gpu_model=itype.gpu_model,
                gpu_count=itype.gpu_count,
                gpu_memory_mb=itype.gpu_memory_mb,
                architecture=itype.architecture,
                fabrics=None if itype.fabrics is None else ",".join(sorted(itype.fabrics)),
                price_on_demand=price.on_demand,
                price_spot=price.spot,
                updated_at=now,
            )
        )
    return len(types)


def cached_catalog(
    session: Session, provider: str | None = None, min_gpus: int | None = None
) -> list[InstanceTypeRow]:
    query = select(InstanceTypeRow).order_by(InstanceTypeRow.provider, InstanceTypeRow.name)
    if provider:
        query = query.where(InstanceTypeRow.provider == provider)
    if min_gpus is not None:
        query = query.where(InstanceTypeRow.gpu_count >= min_gpus)
    return list(session.scalars(query))


def unoffered_types(settings: Settings, offered: dict[str, set[str]]) -> list[str]:
    """One line per template instance type its provider does not offer, for the providers
    whose catalog is known (`offered`: provider -> the type names it offers). A launch of
    such a type can only fail (INVALID), so it is found here rather than by launching."""
    problems = []
    for template in settings.templates:
        names = offered.get(template.provider)
        if not names:
            continue
        for itype in template.instance_types:
            if itype not in names:
                region = settings.provider(template.provider).region
                problems.append(
                    f"template {template.name}: instance type {itype} is not offered by "
                    f"provider {template.provider} (region {region}); `clustermgr catalog "
                    f"--provider {template.provider}` lists what is"
                )
    return problems


# a template's fabric -> what the catalog calls it, and where the cloud says so
FABRIC_WORDS = {
    "efa": ("EFA", "DescribeInstanceTypes NetworkInfo.EfaSupported"),
    "infiniband": ("InfiniBand", "resource SKU capability RdmaEnabled"),
}


def unfit_fabrics(settings: Settings, rows: Sequence[InstanceTypeRow]) -> list[str]:
    """One line per template instance type that lacks the template's fabric, by its
    provider's cached catalog (types the catalog says nothing about are not judged: an
    OpenStack flavor, a row from before the catalog read fabrics)."""
    known = {(r.provider, r.name): r.fabrics for r in rows}
    problems = []
    for template in settings.templates:
        fabric = template.fabric
        if fabric not in FABRIC_WORDS:
            continue
        word, source = FABRIC_WORDS[fabric]
        key = "efa = true" if fabric == "efa" else "infiniband = true"
        for itype in template.instance_types:
            fabrics = known.get((template.provider, itype))
            if fabrics is None or fabric in fabrics.split(","):
                continue
            problems.append(
                f"template {template.name}: {key}, but instance type {itype} has no {word} "
                f"(provider {template.provider}'s catalog: {source}); choose a type with it "
                f"or remove {key.split(' ')[0]}"
            )
    return problems


def offered_by_rows(rows: Sequence[InstanceTypeRow]) -> dict[str, set[str]]:
    offered: dict[str, set[str]] = {}
    for row in rows:
        offered.setdefault(row.provider, set()).add(row.name)
    return offered

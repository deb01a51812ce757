"""Which packages the wheel holds; the project's metadata is in pyproject.toml.

Every package under clustermgr/ is found by setuptools, so a new one needs no edit here.
The repository's top-level folders of shipped code and data are installed inside the
clustermgr namespace (a site-packages of other projects has no top-level name of ours but
`clustermgr`), each with the packages setuptools finds below it.
"""

from setuptools import find_packages, setup

# top-level folder of the repository -> the package it is installed as
INSTALLED_AS = {
    "policies": "clustermgr.policies",
    "migrations": "clustermgr.migrations",
    "images": "clustermgr.images",
}


def packages() -> list[str]:
    found = find_packages(include=["clustermgr", "clustermgr.*"])
    for folder, package in INSTALLED_AS.items():
        found += [package, *(f"{package}.{sub}" for sub in find_packages(where=folder))]
    return found


setup(
    packages=packages(),
    package_dir={package: folder for folder, package in INSTALLED_AS.items()},
)

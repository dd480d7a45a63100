"""The package map: the repository's top-level folders install under one namespace.

``agents/`` installs as ``agentenvs.agents``, ``train/`` as ``agentenvs.train`` and so on, so the
wheel puts exactly one top-level package (``agentenvs``) into site-packages. Everything else about
the distribution is in ``pyproject.toml``.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = {
    "agentenvs": "agentenvs",
    "agentenvs.agents": "agents",
    "agentenvs.replay": "replay",
    "agentenvs.train": "train",
    "agentenvs.benchmarks": "benchmarks",
    "agentenvs.integrations": "integrations",
}


def namespace_packages() -> list[str]:
    """Every package under each folder, named inside the ``agentenvs`` namespace (data folders
    without an ``__init__.py`` count, so that their files ship)."""
    names = []
    for name, folder in FOLDERS.items():
        names.append(name)
        names += [
            f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])
        ]
    return sorted(names)


# Data files that ship inside the packages (environment data, templates, the kernel source, the
# viewer's page).
PACKAGE_DATA = [
    "*.json",
    "*.json.gz",
    "*.tar.gz",
    "*.txt",
    "*.html",
    "*.j2",
    "*.md",
    "*.c",
    "*.yaml",
    "*.js",
    "*.css",
]

setup(
    packages=namespace_packages(),
    package_dir=FOLDERS,
    package_data={"": PACKAGE_DATA},
)

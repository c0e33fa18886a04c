"""What examples/ imports is installed by `pip install -e '.[examples]'` (QA148: two
examples failed with ModuleNotFoundError after the README's plain install, their packages
named only in the test extra): each third-party module an example imports belongs to a
distribution the gateway or its `examples` extra requires, or one of theirs requires."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OWN_PACKAGES = {"gateway", "agents_trace", "cache", "shards", "benchmarks"}


def distribution_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - OWN_PACKAGES - {"__future__"}


def test_every_example_import_comes_with_the_examples_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {distribution_name(r) for r in project["dependencies"] + project["optional-dependencies"]["examples"]}
    reachable = set(declared)
    for name in declared:   # and what they require in turn (langchain-core comes with langchain-openai)
        reachable |= {distribution_name(r) for r in importlib.metadata.requires(name) or () if "extra ==" not in r}
    providers = importlib.metadata.packages_distributions()
    missing = {}
    own = {path.stem for path in (REPO / "examples").glob("*.py")}   # _errors.py: the examples' shared module
    for example in sorted((REPO / "examples").glob("*.py")):
        for module in imported_modules(example) - own:
            dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
            if not dists & reachable:
                missing[f"{example.name}: {module}"] = sorted(dists)
    assert missing == {}
    assert {"openai", "langchain-openai", "openai-agents"} <= declared

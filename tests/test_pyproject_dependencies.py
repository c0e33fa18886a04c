"""pyproject.toml declares every distribution the product's code imports (QA178: jinja2 and
pydantic_core came only through other packages, so a release of one that dropped them would
have broken a fresh install)."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = ("gateway", "agents_trace", "cache", "shards")
OWN_NAMES = {*PRODUCT_PACKAGES, "benchmarks", "examples", "tests", "__future__"}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> dict[str, set[str]]:
    """Top-level module name -> the product files that import it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for package in PRODUCT_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_module_the_product_imports_comes_from_a_declared_dependency():
    declared = {_normalized(re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)) for requirement in
                tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    providers = importlib.metadata.packages_distributions()
    undeclared = {module: sorted(files) for module, files in imported_modules().items()
                  if module not in sys.stdlib_module_names and module not in OWN_NAMES
                  and not any(_normalized(dist) in declared for dist in providers.get(module, []))}
    assert undeclared == {}, f"imported but not in [project] dependencies: {undeclared}"

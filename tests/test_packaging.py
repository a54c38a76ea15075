"""What a built wheel carries: every directory of configuration and data the package reads is a
package of pyproject.toml's list, and its files match that package's data patterns, so that
setuptools ships them."""
from fnmatch import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def _shipped_files():
    """{package name: file names} of each directory under conf/ (as dse.conf) and dse/data/measured
    holding a file the package reads (.yaml or .csv)."""
    out: dict[str, set[str]] = {}
    for base, prefix, suffix in ((ROOT / "conf", "dse.conf", ".yaml"), (ROOT / "dse" / "data" / "measured",
                                                                          "dse.data.measured", ".csv")):
        for path in base.rglob(f"*{suffix}"):
            name = ".".join((prefix, *path.parent.relative_to(base).parts))
            out.setdefault(name, set()).add(path.name)
    return out


def test_every_directory_of_configuration_and_data_is_a_listed_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = _shipped_files()
    assert {"dse.conf", "dse.conf.system", "dse.conf.case.fabric", "dse.data.measured"} <= set(shipped)
    missing = set(shipped) - set(config["packages"])
    assert not missing, f"add to [tool.setuptools] packages: {sorted(missing)}"
    data = config["package-data"]
    for package, files in shipped.items():  # setuptools ships a package's files its own or "*"'s patterns match
        patterns = data.get(package, []) + data.get("*", [])
        left = sorted(f for f in files if not any(fnmatch(f, p) for p in patterns))
        assert not left, f"{package}: no package-data pattern ships {left}"

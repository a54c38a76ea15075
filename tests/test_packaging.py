"""What a built wheel carries: every directory of configuration and data the package reads is a
package of pyproject.toml's list, so that setuptools ships its files."""
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def _shipped_dirs():
    """The package name of each directory under conf/ (as dse.conf) and dse/data/measured that
    holds a file the package reads (.yaml or .csv)."""
    names = set()
    for base, prefix, suffix in ((ROOT / "conf", "dse.conf", ".yaml"), (ROOT / "dse" / "data" / "measured",
                                                                          "dse.data.measured", ".csv")):
        for path in base.rglob(f"*{suffix}"):
            rel = path.parent.relative_to(base).parts
            names.add(".".join((prefix, *rel)))
    return names


def test_every_directory_of_configuration_and_data_is_a_listed_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    shipped = _shipped_dirs()
    assert {"dse.conf", "dse.conf.system", "dse.conf.case.fabric", "dse.data.measured"} <= shipped
    assert shipped - listed == set(), f"add to [tool.setuptools] packages: {sorted(shipped - listed)}"
    assert config["package-dir"] == {"dse.conf": "conf"}
    data = config["package-data"]
    assert data["*"] == ["*.yaml"] and data["dse.data.measured"] == ["*.csv"]

"""The README's first lines, which a new user acts on, against the Makefile they describe."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_readme_names_each_system_package_make_installs() -> None:
    """Each package the Makefile installs with apt-get is named in the README's opening (a
    machine without one, as an unprivileged user, stops `make test` on it)."""
    makefile = (ROOT / "Makefile").read_text()
    # Node.js and npm are named as such: the README says `npm install` needs npm.
    packages = set(re.findall(r"apt-get install -y ([\w.+-]+)", makefile)) - {"nodejs"}
    assert packages, "no apt-get install in the Makefile: this test reads it wrongly"
    opening = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    missing = sorted(p for p in packages if f"`{p}`" not in opening)
    assert not missing, f"the README's opening does not say make installs {missing}"

"""Write the licenses of every npm package an esbuild bundle holds, beside the bundle.

``python3 scripts/bundle_licenses.py METAFILE OUT``: METAFILE is esbuild's ``--metafile``
of the build; OUT gets, for each package whose files went into the bundle (sorted by name),
its name, version and license, then its LICENSE file. The bundle is committed and shipped
(``sandbox/typescript.bundle.js``), and MIT and Apache-2.0 both ask that their text go with
every copy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def packages(metafile: Path) -> list[Path]:
    """The directories of the packages the build read files from."""
    found: set[Path] = set()
    for name in json.loads(metafile.read_text("utf-8"))["inputs"]:
        parts = Path(name).parts
        if "node_modules" not in parts:
            continue
        at = len(parts) - 1 - parts[::-1].index("node_modules")  # the innermost package
        depth = 2 if parts[at + 1].startswith("@") else 1
        found.add(Path(*parts[: at + 1 + depth]))
    return sorted(found, key=lambda p: p.as_posix())


def license_text(package: Path) -> str:
    files = sorted(
        p for p in package.iterdir() if p.name.upper().startswith(("LICENSE", "LICENCE"))
    )
    if not files:
        raise SystemExit(f"{package} has no LICENSE file: its terms must ship with the bundle")
    return "\n".join(f.read_text("utf-8").strip() for f in files)


def main(argv: list[str]) -> int:
    metafile, out = Path(argv[1]), Path(argv[2])
    sections = []
    for package in packages(metafile):
        meta = json.loads((package / "package.json").read_text("utf-8"))
        head = f"{meta['name']} {meta['version']} ({meta.get('license', 'see below')})"
        sections.append(f"{head}\n{'=' * len(head)}\n\n{license_text(package)}\n")
    intro = (
        f"{Path(out.name.removesuffix('.LICENSE.txt'))} bundles these npm packages "
        "(built by `make`, see the Makefile); their licenses follow.\n"
    )
    out.write_text(intro + "\n" + "\n".join(sections), "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

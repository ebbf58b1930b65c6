"""The files that hold the generated trace schema, and the command that rewrites them.

The trace format is defined once, by the line types of ``lockstep.traces.schema``; the JSON Schema
generated from them is kept in two files: ``lockstep/traces/trace-schema.json``, shipped in the
package (what ``lockstep.traces.schema()`` reads), and ``docs/schemas/trace.schema.json``, a
byte-identical copy published with the other schemas. Neither is edited by hand:
``python -m lockstep.traces.schema_files`` rewrites both after a change to the types, and with
``--check`` only says which are stale (exit 1). A test fails while either differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lockstep.traces.output import write_atomically
from lockstep.traces.schema import SCHEMA_RESOURCE, schema_text

PUBLISHED_SCHEMA = Path("docs") / "schemas" / "trace.schema.json"  # relative to the repository root
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def schema_files(root: Path = REPOSITORY_ROOT) -> list[Path]:
    """The shipped schema file, and the published copy when ``root`` (a checkout) has a docs folder."""
    files = [Path(__file__).with_name(SCHEMA_RESOURCE)]
    if (root / "docs").is_dir():
        files.append(root / PUBLISHED_SCHEMA)
    return files


def stale_files(root: Path = REPOSITORY_ROOT) -> list[Path]:
    """The schema files whose text is not the generated schema's."""
    text = schema_text()
    return [path for path in schema_files(root) if not path.is_file() or path.read_text("utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the stale schema files from the line types, or with ``--check`` list them (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m lockstep.traces.schema_files", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is stale")
    parser.add_argument("--root", type=Path, default=REPOSITORY_ROOT, help="the repository checkout")
    arguments = parser.parse_args(argv)
    stale = stale_files(arguments.root)
    text = schema_text()
    for path in stale:
        if arguments.check:
            sys.stderr.write(f"{path}: stale; run python -m lockstep.traces.schema_files\n")
        else:
            write_atomically(path, lambda file: file.write(text))
            sys.stderr.write(f"wrote {path}\n")
    return 1 if arguments.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

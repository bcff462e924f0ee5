"""Command line: ``python -m calc {estimate,measure,max-batch,models,gpus,validate}``.

``estimate`` and ``measure`` take the same options; with ``--json`` each prints one
JSON object with ``peak_bytes`` and ``components``. Bad options print one line and
exit with status 2. ``calc.cli.options`` parses the shared options, ``calc.cli.estimate``
answers ``estimate`` and ``max-batch``, ``calc.cli.validate`` answers ``validate``, and
``calc.cli.main`` holds the parser, ``measure``, ``models`` and ``gpus``.
"""

from calc.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

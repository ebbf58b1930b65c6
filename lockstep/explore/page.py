"""The explorer's page: its files in ``lockstep/explore/assets/`` (package data: one HTML template,
plain JS, CSS; no CDN, no build step), served as they are or inlined into one file.

- ``asset(name)``: an asset's bytes and content type (only the names in ``ASSETS``).
- ``live_page()``: the template with links to ``assets/explore.css`` and ``assets/explore.js``
  (relative: the server puts the page, its assets and its API under the session's token).
- ``static_page(document)``: one self-contained HTML file (``lockstep show --html``): the CSS and JS
  inlined, the document inlined as JSON (``<``, ``>`` and ``&`` escaped, so no text in a trace can
  close the script element), and a Content-Security-Policy that allows exactly those inline blocks
  (by hash) and nothing from the network.
"""

from __future__ import annotations

import base64
import hashlib
import json
from importlib import resources
from typing import Any

ASSETS = {
    "explore.html": "text/html; charset=utf-8",
    "explore.js": "text/javascript; charset=utf-8",
    "explore.css": "text/css; charset=utf-8",
}
HEAD, BODY = "<!-- lockstep:head -->", "<!-- lockstep:body -->"


def asset(name: str) -> tuple[bytes, str]:
    """The bytes and content type of asset ``name`` (``KeyError`` for any other name)."""
    content_type = ASSETS[name]
    return resources.files("lockstep.explore").joinpath("assets", name).read_bytes(), content_type


def _text(name: str) -> str:
    return asset(name)[0].decode("utf-8")


def live_page() -> str:
    """The page the server serves: the template, its CSS and JS linked."""
    template = _text("explore.html")
    return template.replace(HEAD, '<link rel="stylesheet" href="assets/explore.css">').replace(
        BODY, '<script src="assets/explore.js"></script>'
    )


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def embedded_json(document: Any) -> str:
    """``document`` as JSON safe inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def static_page(document: Any) -> str:
    """One self-contained HTML file drawing ``document`` (see the module doc)."""
    template, style, script = _text("explore.html"), _text("explore.css"), _text("explore.js")
    for name, text, closing in (("explore.css", style, "</style"), ("explore.js", script, "</script")):
        if closing in text.lower():
            raise ValueError(f"asset {name} contains {closing}>: it cannot be inlined")
    policy = (
        f"default-src 'none'; style-src '{_hash(style)}'; script-src '{_hash(script)}'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )
    head = f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n<style>{style}</style>'
    body = (
        f'<script type="application/json" id="lockstep-document">{embedded_json(document)}</script>\n'
        f"<script>{script}</script>"
    )
    return template.replace(HEAD, head).replace(BODY, body)

"""The embedded default corpus: CPython's ``pydoc_data.topics`` (ships with every Python)."""

from __future__ import annotations


def embedded_text() -> str:
    """The language-reference topics joined in a fixed (sorted) order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))

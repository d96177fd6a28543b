"""What every family's JUnit XML shares: elements built with ElementTree, never a string
template (every name and text is escaped by it), what XML 1.0 cannot carry at all (control
characters, lone surrogates) replaced first."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from orchestrator.reports.files import clean


def element(parent: ET.Element, tag: str, **attributes: object) -> ET.Element:
    return ET.SubElement(parent, tag, {k: clean(str(v)) for k, v in attributes.items()})


def document(root: ET.Element) -> str:
    """The document of ``root``, indented, with its declaration."""
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

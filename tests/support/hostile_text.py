"""Hostile text for the report tests: what a store may hold where it takes text (markup, template
syntax, CDATA ends, Markdown table pipes, invalid UTF-8 as decoded, control characters), and
hostile factor and level names and lone surrogates, which a campaign file's validation and the
store keep out but a renderer must survive all the same."""

from __future__ import annotations

BAD_UTF8 = b"\xff\xfe\xc3( \xed\xa0\x80".decode("utf-8", "replace")  # as a server's bytes decode
CONTROL = "\x01\x08\x0b\x0c\x1b[31m\x7f\x85"
HOSTILE = ("<script>window.PWNED=1</script></textarea><img src=x onerror=alert(1)>{{ range(7) }}"
           "{% raw %}]]><![CDATA[x]]>|a|b| `code` [link](javascript:alert(1)) *em* $x$ & "
           f"{BAD_UTF8}{CONTROL}\nsecond line\r\n")
HOSTILE_FACTOR = "idx|<script>f</script>`"
HOSTILE_LEVEL = "bf16</textarea>]]>{{x}}|\n"
LONE = "\udcff\ud800"  # undecodable bytes kept as text (surrogateescape)

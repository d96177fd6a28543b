"""The search family: a search's answer (``model``, ``build``) on the campaign's model, read
in words (``text``), drawn (``charts``) and rendered (``html``, ``markdown``, ``junit``)."""

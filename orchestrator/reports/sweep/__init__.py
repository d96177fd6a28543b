"""The sweep family: one run of a regression sweep (``model``, ``build``), its figures in words
(``words``), drawn (``charts``) and rendered (``html``, ``markdown``, ``junit``)."""

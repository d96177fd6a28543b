"""The campaign family: the report of one campaign's verdict (``model``, ``build``), its
renderers (``html``, ``markdown``, ``junit``), two campaigns compared, the index of a store."""

"""Reports: built from the store through ``orchestrator.stored``, never from the executor.

Three families, each a package with its model, its builder and its renderers: ``campaign``
(a campaign's verdict, with ``compare`` and ``index``), ``search`` (a search's answer, on the
campaign's model), ``sweep`` (a run of a regression sweep). ``renderer`` finds the renderer of
a (format, family); the charts, the HTML page, Markdown's escaping, JUnit's elements and JSON
are shared (``charts``, ``page``, ``text``, ``junit_xml``, ``document``)."""

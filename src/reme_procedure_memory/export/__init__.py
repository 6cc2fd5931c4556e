"""The export of experiences as Agent Skills folders (``procedure_export``): rendering (``skills``), the marker of
what the export wrote (``marker``), the pure plan of a run (``plan``), the destination's checks (``destination``) and
the run itself (``exporter``)."""

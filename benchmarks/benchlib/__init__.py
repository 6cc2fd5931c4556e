"""The benchmarks' shared library: where ``../shared`` is (``shared``), the machine and revision (``machine``), the
synthetic corpus and fake embedding model of the search benchmarks (``corpus``), ReMe's released library as a
workspace (``library``), the MiniLM embedding server (``minilm``), free local ports (``ports``), the sign test
(``stats``), and the transfer mode's trajectory parser and
metrics (``turns``, ``transfer``). Benchmark scripts run from their directory, so ``benchlib`` is importable; nothing
here imports a benchmark script."""

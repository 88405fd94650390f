"""What the tests and the benchmarks share, so that neither imports the other.

- :mod:`.procs`    hookrelay and its helpers as child processes: ports, the environment,
  the command line, so tests and benchmarks start hookrelay the same way
- :mod:`.waiting`  :func:`~harness.waiting.eventually`, in place of fixed sleeps

Not installed: like ``tests`` and ``bench`` it is imported from the repository's top.
It imports hookrelay's installed packages at most, never ``tests`` or ``bench``.
"""

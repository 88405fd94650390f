"""What the tests and the benchmarks share, so that neither imports the other.

- :mod:`.procs`    hookrelay and its helpers as child processes: ports, the environment,
  the command line, so tests and benchmarks start hookrelay the same way
- :mod:`.waiting`  :func:`~tests.harness.waiting.eventually`, in place of fixed sleeps
- :mod:`.expired`  finished tasks, events, keys and attempts past retention, to purge
- :mod:`.releases` the previous release installed from this repository's history
- :mod:`.tinyproxy` Debian's tinyproxy as a child process (the egress-proxy path)

The benchmarks import it (and nothing else of ``tests``); the tests never import
``bench``. It imports hookrelay's installed packages at most, never the rest of
``tests`` or ``bench``.
"""

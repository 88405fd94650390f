"""Running hookrelay: the settings, what a process needs before it serves, the database
at start, the Starlette app's assembly, the long-running commands and their lifecycle.

- :mod:`.settings`, :mod:`.prerequisites`  the environment read and checked; DSN, token, key
- :mod:`.embedded`, :mod:`.embedded_recovery`  the zero-setup PostgreSQL, and after a crash
- :mod:`.open_database`  migrations first, then the master key check
- :mod:`.app`          the API's routes, the streams and the console mounted as one app
- :mod:`.background`   the dispatcher and the sweeper beside the API
- :mod:`.processes`    ``serve``, ``api`` and ``dispatch``; :mod:`.lifecycle` starts and
  stops them; :mod:`.event_loop` and :mod:`.http_protocol` tune uvicorn
- :mod:`.logs`, :mod:`.tty_text`  JSON log lines; text made safe for a terminal

May import the API, the console, the live streams and the outbox; never the CLI,
which builds on this package.
"""

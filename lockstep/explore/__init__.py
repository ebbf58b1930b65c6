"""The explorer: a model instance or a trace in the browser (``lockstep explore``, ``lockstep show --html``).

- ``lockstep.explore.session``: the state of one exploration (the model, the path, the cursor) and
  what can be done to it (take an enabled action, step back and forth, jump, reset, export the path
  as a trace ``lockstep replay`` reads), and the JSON document the page draws.
- ``lockstep.explore.recorded``: a trace read into explorer steps through lockstep's one replay path
  (``lockstep.checkers.conformance.judgement.replay_traces``), the divergence at its event.
- ``lockstep.explore.page``: the page's files (``assets/``, package data: HTML, plain JS, CSS, no
  CDN, no build step), served as they are or inlined with a document into one self-contained file.
- ``lockstep.explore.server``: the local HTTP server (stdlib ``http.server``), bound to 127.0.0.1,
  with a per-session token in every URL and the Host header checked against DNS rebinding.

Nothing here prints; ``lockstep.cli.explore`` is the command.
"""
